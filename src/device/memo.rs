//! What a launch works out from its problem alone (the tile choice, the variant and its loaded
//! function, the grid), kept per context: a warm call of a problem seen before then only builds
//! its tensor maps and launches, which keeps a model's per-call host cost near the driver's.

use std::any::{Any, TypeId};
use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, RandomState};

use crate::error::Result;

/// Entries kept before the memo starts over (a process that sweeps shapes does not grow it
/// without bound; a model's few dozen problems stay).
const CAPACITY: usize = 4096;

/// Values by key, for any key and value types: an op keeps here what it derived from a key
/// (its problem, the operands' alignment), and reads it back on the next call with that key.
#[derive(Default)]
pub struct LaunchMemo {
    hasher: RandomState,
    map: RefCell<HashMap<u64, Box<dyn Any>>>,
}

impl LaunchMemo {
    /// The value kept for `key`, or `make`'s, kept for the next call (an error is returned and
    /// nothing kept). `make` may use the memo itself.
    pub fn get_or_try<K, V>(&self, key: &K, make: impl FnOnce() -> Result<V>) -> Result<V>
    where
        K: Hash + Eq + Clone + 'static,
        V: Clone + 'static,
    {
        let h = self.hasher.hash_one((TypeId::of::<(K, V)>(), key));
        if let Some((k, v)) = self
            .map
            .borrow()
            .get(&h)
            .and_then(|b| b.downcast_ref::<(K, V)>())
        {
            if k == key {
                return Ok(v.clone());
            }
        }
        let v = make()?;
        let mut map = self.map.borrow_mut();
        if map.len() >= CAPACITY {
            map.clear();
        }
        map.insert(h, Box::new((key.clone(), v.clone())));
        Ok(v)
    }

    /// Forgets everything (the overrides or the tuned table that choices came from changed).
    pub fn clear(&self) {
        self.map.borrow_mut().clear();
    }

    pub fn len(&self) -> usize {
        self.map.borrow().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_made_once_per_key_and_type() {
        let memo = LaunchMemo::default();
        let mut made = 0;
        for _ in 0..3 {
            let v: u32 = memo
                .get_or_try(&(1u32, 2u64), || {
                    made += 1;
                    Ok(7)
                })
                .unwrap();
            assert_eq!(v, 7);
        }
        assert_eq!(made, 1);
        // the same key with another value type is another entry
        let s: String = memo.get_or_try(&(1u32, 2u64), || Ok("x".into())).unwrap();
        assert_eq!(s, "x");
        assert_eq!(memo.len(), 2);
    }

    #[test]
    fn an_error_is_not_kept() {
        let memo = LaunchMemo::default();
        let r: Result<u32> = memo.get_or_try(&5u8, || Err(crate::error::Error::invalid("no")));
        assert!(r.is_err());
        assert_eq!(memo.get_or_try(&5u8, || Ok(3u32)).unwrap(), 3);
    }

    #[test]
    fn it_starts_over_past_its_capacity() {
        let memo = LaunchMemo::default();
        for i in 0..CAPACITY + 1 {
            let _: usize = memo.get_or_try(&i, || Ok(i)).unwrap();
        }
        assert_eq!(memo.len(), 1);
    }
}
