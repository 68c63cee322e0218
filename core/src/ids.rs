//! Where fresh UUIDs come from (operation ids, lease tokens).
//!
//! Production never touches this module: without an installed source, [`fresh_uuid`] is
//! `Uuid::new_v4()`, as before. The deterministic simulation (`infra/simulate`) runs on one thread
//! and installs a seeded source for that thread, so the same seed mints the same ids and replays
//! the same run. A seam, not a behaviour: nothing decides anything differently with it.

use std::cell::RefCell;

use uuid::Uuid;

/// A source of random 128-bit values for this thread.
pub type IdSource = Box<dyn FnMut() -> u128>;

thread_local! {
    static SOURCE: RefCell<Option<IdSource>> = const { RefCell::new(None) };
}

/// A fresh version-4 UUID: from this thread's installed source, else from the OS's randomness.
pub fn fresh_uuid() -> Uuid {
    SOURCE
        .with(|s| s.borrow_mut().as_mut().map(|f| f()))
        .map(|bits| uuid::Builder::from_random_bytes(bits.to_le_bytes()).into_uuid())
        .unwrap_or_else(Uuid::new_v4)
}

/// Installs `source` for the current thread (replacing any other); returns the previous one.
pub fn install_thread_source(source: Option<IdSource>) -> Option<IdSource> {
    SOURCE.with(|s| std::mem::replace(&mut *s.borrow_mut(), source))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_random_and_an_installed_source_is_used_on_this_thread_only() {
        assert_ne!(fresh_uuid(), fresh_uuid());
        let mut n = 0u128;
        install_thread_source(Some(Box::new(move || {
            n += 1;
            n
        })));
        let a = fresh_uuid();
        assert_eq!(a.get_version_num(), 4);
        let other = std::thread::spawn(fresh_uuid).join().unwrap();
        assert_ne!(other, a);
        install_thread_source(None);
        let mut m = 0u128;
        install_thread_source(Some(Box::new(move || {
            m += 1;
            m
        })));
        assert_eq!(fresh_uuid(), a, "same source, same ids");
        install_thread_source(None);
    }
}
