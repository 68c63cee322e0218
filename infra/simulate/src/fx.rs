//! FxHash for the simulation's maps: stripe-sim's (one hasher for the simulator's engine and
//! for `simulate`).

pub use stripe_sim::fx::{hash_one, Fx, FxHashMap, FxHashSet, FxHasher};
