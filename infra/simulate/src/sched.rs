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

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use rand::rngs::SmallRng;
use rand::Rng;

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
        {
            let mut w = parent.waker.lock().unwrap_or_else(|p| p.into_inner());
            if !w.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *w = Some(cx.waker().clone());
            }
        }
        parent.polling.store(true, Ordering::Release);
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
            let pick = if runnable.len() == 1 {
                runnable[0]
            } else {
                let n = runnable.len();
                runnable[rng
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .random_range(0..n)]
            };
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
    use super::*;
    use rand::SeedableRng;

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
