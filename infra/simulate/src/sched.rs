//! The seeded scheduler: concurrency without threads.
//!
//! [`run_all`] drives a set of futures on the current task. At every step it picks one of the
//! runnable futures with the simulation's seeded RNG and polls it until its next suspension. The
//! simulation's ports suspend at every call ([`yield_now`]), so two handler invocations interleave
//! at exactly the points where real ones race (between a claim and a record, a create and its
//! answer), in an order the seed decides. Nothing here reads a clock or depends on thread timing:
//! with in-memory ports every suspension is a `yield_now`, and the same seed gives the same
//! interleaving. With real I/O (`--backend aws`, `--stripe http`) a future waiting on a socket is
//! simply not runnable until tokio wakes it; those runs are not deterministic.
//!
//! **Timers: virtual time that passes inside calls.** With [`Timers::install`] (the load model),
//! [`sleep_until`] / [`sleep`] register a wake time on the virtual clock; when no task of the
//! outermost [`run_all`] is runnable, it moves the clock to the earliest wake time and wakes the
//! tasks registered for it (in registration order; the seeded pick decides among them). Without
//! timers installed a sleep just moves the clock (one caller at a time). [`SchedSleeper`] is the
//! charge function's [`charge_once::ports::Sleeper`] on them.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use charge_core::time::{Clock, ManualClock, Timestamp};
use rand::rngs::SmallRng;
use rand::Rng;

struct TimerState {
    clock: ManualClock,
    /// (wake time in ms, registration number) → the sleeper's waker.
    pending: BTreeMap<(i64, u64), Waker>,
    next: u64,
}

thread_local! {
    static TIMERS: RefCell<Option<TimerState>> = const { RefCell::new(None) };
    /// How many `run_all` loops are polling on this thread (1: the outermost).
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Timers on this thread's virtual clock while alive (see the module docs).
pub struct Timers;

impl Timers {
    pub fn install(clock: ManualClock) -> Self {
        TIMERS.with(|t| {
            *t.borrow_mut() = Some(TimerState {
                clock,
                pending: BTreeMap::new(),
                next: 0,
            })
        });
        Timers
    }
}

impl Drop for Timers {
    fn drop(&mut self) {
        TIMERS.with(|t| *t.borrow_mut() = None);
    }
}

/// Moves the clock to the earliest timer and wakes every sleeper due then; false if none is set.
fn fire_next() -> bool {
    TIMERS.with(|t| {
        let mut t = t.borrow_mut();
        let Some(st) = t.as_mut() else {
            return false;
        };
        let Some((&(at, _), _)) = st.pending.iter().next() else {
            return false;
        };
        if st.clock.now().as_millis() < at {
            st.clock.set(Timestamp::from_millis(at));
        }
        let now = st.clock.now().as_millis();
        let later = st.pending.split_off(&(now + 1, 0));
        let due = std::mem::replace(&mut st.pending, later);
        drop(t);
        for (_, w) in due {
            w.wake();
        }
        true
    })
}

/// Suspends until the virtual clock reads `at` (at once if it already does).
pub fn sleep_until(at: Timestamp) -> Sleep {
    Sleep { at, key: None }
}

/// The future of [`sleep_until`]; dropping it cancels its timer.
pub struct Sleep {
    at: Timestamp,
    key: Option<(i64, u64)>,
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        TIMERS.with(|t| {
            let mut t = t.borrow_mut();
            let Some(st) = t.as_mut() else {
                // No timers: nobody else runs meanwhile, so the time simply passes.
                return Poll::Ready(());
            };
            if st.clock.now() >= this.at {
                if let Some(k) = this.key.take() {
                    st.pending.remove(&k);
                }
                return Poll::Ready(());
            }
            match this.key.and_then(|k| st.pending.get_mut(&k)) {
                Some(w) => w.clone_from(cx.waker()),
                None => {
                    st.next += 1;
                    let k = (this.at.as_millis(), st.next);
                    st.pending.insert(k, cx.waker().clone());
                    this.key = Some(k);
                }
            }
            Poll::Pending
        })
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some(k) = self.key.take() {
            // A thread-local being torn down has no timers left to cancel.
            let _ = TIMERS.try_with(|t| {
                if let Ok(mut t) = t.try_borrow_mut() {
                    if let Some(st) = t.as_mut() {
                        st.pending.remove(&k);
                    }
                }
            });
        }
    }
}

/// Whether [`Timers`] are installed on this thread.
pub fn timers_installed() -> bool {
    TIMERS.with(|t| t.borrow().is_some())
}

/// Sleeps `d` of virtual time on the installed timers (at once without them).
pub fn sleep_for(d: Duration) -> Sleep {
    let at = TIMERS.with(|t| t.borrow().as_ref().map(|st| st.clock.now().plus(d)));
    sleep_until(at.unwrap_or(Timestamp::from_millis(i64::MIN)))
}

/// `sleep_until(now + d)`; without timers installed it moves `clock` by `d`.
pub fn sleep(clock: &ManualClock, d: Duration) -> Sleep {
    let at = clock.now().plus(d);
    if !timers_installed() && !d.is_zero() {
        clock.advance(d);
    }
    sleep_until(at)
}

/// The pacing [`charge_once::ports::Sleeper`] on the scheduler's timers.
#[derive(Clone)]
pub struct SchedSleeper(pub ManualClock);

impl charge_once::ports::Sleeper for SchedSleeper {
    fn sleep(&self, d: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(sleep(&self.0, d))
    }
}

/// Suspends once and is runnable again at once: a point where the scheduler may switch.
pub async fn yield_now() {
    let mut yielded = false;
    std::future::poll_fn(move |cx| {
        if yielded {
            Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    })
    .await
}

struct Parent {
    waker: Mutex<Option<Waker>>,
    /// `run_all` is inside its loop and will see a task made ready: no need to wake it.
    polling: AtomicBool,
}

impl Parent {
    /// `run_all` is to be woken through `waker` (kept unless it would wake the same task).
    fn wake_with(&self, waker: &Waker) {
        let mut w = self.waker.lock().unwrap_or_else(|p| p.into_inner());
        if !w.as_ref().is_some_and(|w| w.will_wake(waker)) {
            *w = Some(waker.clone());
        }
    }
}

struct TaskWaker {
    ready: AtomicBool,
    parent: Arc<Parent>,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.ready.swap(true, Ordering::AcqRel) && !self.parent.polling.load(Ordering::Acquire)
        {
            if let Some(w) = self
                .parent
                .waker
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
            {
                w.wake_by_ref();
            }
        }
    }
}

/// This thread's place in nested [`run_all`]s while one polls: only the outermost moves the
/// virtual clock to the next timer.
struct Depth;

impl Depth {
    fn enter() -> Self {
        DEPTH.with(|d| d.set(d.get() + 1));
        Depth
    }

    fn outermost(&self) -> bool {
        DEPTH.with(|d| d.get()) == 1
    }
}

impl Drop for Depth {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

/// The runnable task to poll next: the seed's choice among them.
fn pick(rng: &Mutex<SmallRng>, runnable: &[usize]) -> usize {
    if runnable.len() == 1 {
        return runnable[0];
    }
    let n = runnable.len();
    runnable[rng
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .random_range(0..n)]
}

/// Runs every future to completion, choosing the next one to poll with `rng`; returns their
/// outputs in the order given.
pub async fn run_all<F: Future>(rng: &Mutex<SmallRng>, futures: Vec<F>) -> Vec<F::Output> {
    let parent = Arc::new(Parent {
        waker: Mutex::new(None),
        polling: AtomicBool::new(false),
    });
    let mut tasks: Vec<Option<Pin<Box<F>>>> =
        futures.into_iter().map(|f| Some(Box::pin(f))).collect();
    let wakers: Vec<Arc<TaskWaker>> = tasks
        .iter()
        .map(|_| {
            Arc::new(TaskWaker {
                ready: AtomicBool::new(true),
                parent: parent.clone(),
            })
        })
        .collect();
    let task_wakers: Vec<Waker> = wakers.iter().map(|w| Waker::from(w.clone())).collect();
    let mut results: Vec<Option<F::Output>> = tasks.iter().map(|_| None).collect();
    let mut left = tasks.len();
    let mut runnable: Vec<usize> = Vec::with_capacity(tasks.len());
    std::future::poll_fn(|cx| {
        parent.wake_with(cx.waker());
        parent.polling.store(true, Ordering::Release);
        let depth = Depth::enter();
        let outermost = depth.outermost();
        loop {
            if left == 0 {
                parent.polling.store(false, Ordering::Release);
                return Poll::Ready(());
            }
            let scan =
                |runnable: &mut Vec<usize>| {
                    runnable.clear();
                    runnable.extend((0..tasks.len()).filter(|i| {
                        tasks[*i].is_some() && wakers[*i].ready.load(Ordering::Acquire)
                    }));
                };
            scan(&mut runnable);
            if runnable.is_empty() && outermost && fire_next() {
                // Virtual time moved to the next timer: its sleepers are runnable now.
                continue;
            }
            if runnable.is_empty() {
                // Only real I/O is outstanding; tokio wakes a task's waker, which wakes us. Stop
                // polling first, then look again, so a wake in between is not lost.
                parent.polling.store(false, Ordering::Release);
                scan(&mut runnable);
                if runnable.is_empty() {
                    return Poll::Pending;
                }
                parent.polling.store(true, Ordering::Release);
            }
            let pick = pick(rng, &runnable);
            wakers[pick].ready.store(false, Ordering::Release);
            let mut task_cx = Context::from_waker(&task_wakers[pick]);
            if let Some(task) = tasks[pick].as_mut() {
                if let Poll::Ready(out) = task.as_mut().poll(&mut task_cx) {
                    results[pick] = Some(out);
                    tasks[pick] = None;
                    left -= 1;
                }
            }
        }
    })
    .await;
    results.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    fn order(seed: u64) -> Vec<u32> {
        let log = Mutex::new(Vec::new());
        let rng = Mutex::new(SmallRng::seed_from_u64(seed));
        let futures = (0..4u32)
            .map(|t| {
                let log = &log;
                async move {
                    for step in 0..5 {
                        log.lock().unwrap().push(t * 10 + step);
                        yield_now().await;
                    }
                    t
                }
            })
            .collect();
        let out = futures_lite_block_on(run_all(&rng, futures));
        assert_eq!(out, vec![0, 1, 2, 3]);
        log.into_inner().unwrap()
    }

    fn futures_lite_block_on<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    /// Sleepers wake in time order on the virtual clock, which jumps from timer to timer.
    #[test]
    fn timers_move_the_clock_to_the_earliest_wake_time() {
        let start = Timestamp::from_millis(1_000_000);
        let clock = ManualClock::new(start);
        let _timers = Timers::install(clock.clone());
        let rng = Mutex::new(SmallRng::seed_from_u64(1));
        let log = Mutex::new(Vec::new());
        let futures = [(0u64, 300u64), (1, 100), (2, 200), (3, 100)]
            .into_iter()
            .map(|(t, ms)| {
                let (log, clock) = (&log, clock.clone());
                async move {
                    sleep(&clock, Duration::from_millis(ms)).await;
                    log.lock()
                        .unwrap()
                        .push((t, clock.now().since(start).as_millis()));
                    // A nested scheduler's sleeper is woken by the outermost one.
                    let inner = Mutex::new(SmallRng::seed_from_u64(t));
                    run_all(&inner, vec![sleep_for(Duration::from_millis(1_000))]).await;
                    clock.now().since(start).as_millis()
                }
            })
            .collect();
        let ends = futures_lite_block_on(run_all(&rng, futures));
        let mut log = log.into_inner().unwrap();
        log.sort_by_key(|(_, at)| *at);
        assert_eq!(
            log.iter().map(|(_, at)| *at).collect::<Vec<_>>(),
            [100, 100, 200, 300]
        );
        assert_eq!(ends, [1_300, 1_100, 1_200, 1_100]);
        assert_eq!(clock.now().since(start), Duration::from_millis(1_300));
    }

    #[test]
    fn same_seed_same_interleaving_other_seed_other_one() {
        assert_eq!(order(1), order(1));
        assert_ne!(order(1), order(2));
        let a = order(3);
        assert_ne!(
            a,
            (0..4)
                .flat_map(|t| (0..5).map(move |s| t * 10 + s))
                .collect::<Vec<_>>()
        );
    }
}
