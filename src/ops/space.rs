//! Parameter spaces: named integer parameters, each with its list of values, and rules between
//! them (each with the reason it exists). A space enumerates, samples, mutates and crosses over
//! [`Config`]s, and every config it hands out satisfies every rule.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use rand::seq::SliceRandom;
use rand::Rng;
use serde::{Deserialize, Serialize};

/// One point of a space: (name, value) pairs in the space's parameter order.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Config(pub Vec<(String, i64)>);

impl Config {
    pub fn new(pairs: &[(&str, i64)]) -> Config {
        Config(pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect())
    }

    pub fn get(&self, name: &str) -> Option<i64> {
        self.0.iter().find(|(k, _)| k == name).map(|(_, v)| *v)
    }

    /// `name`'s value, or an error naming the missing parameter.
    pub fn require(&self, name: &str) -> std::result::Result<i64, String> {
        self.get(name)
            .ok_or_else(|| format!("config {self} has no parameter {name}"))
    }

    /// Sets `name` (appending it if absent).
    pub fn set(&mut self, name: &str, value: i64) {
        match self.0.iter_mut().find(|(k, _)| k == name) {
            Some(slot) => slot.1 = value,
            None => self.0.push((name.to_string(), value)),
        }
    }

    /// `BM=128,BN=256,...`: the label stored with every tuning result.
    pub fn label(&self) -> String {
        self.0
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Parses a label written by [`Config::label`].
    pub fn parse(label: &str) -> std::result::Result<Config, String> {
        let mut c = Config(Vec::new());
        for part in label.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("`{part}` is not NAME=VALUE"))?;
            let v = v
                .trim()
                .parse()
                .map_err(|_| format!("`{v}` in `{part}` is not an integer"))?;
            c.set(k.trim(), v);
        }
        Ok(c)
    }
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())
    }
}

/// One named parameter and the values it may take (in order: mutation steps to neighbours).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Param {
    pub name: String,
    pub values: Vec<i64>,
    /// A launch-time parameter (e.g. a split-K factor passed as a kernel argument): it takes no
    /// part in the compiled code, so configs differing only in it share a CUBIN and are still
    /// distinct candidates.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub launch: bool,
}

impl Param {
    /// Where `c`'s value of this parameter stands among its values (the first if none).
    pub fn index_in(&self, c: &Config) -> usize {
        self.values
            .iter()
            .position(|&v| Some(v) == c.get(&self.name))
            .unwrap_or(0)
    }

    /// A value index next to `cur` (inward at the ends, else either side with even odds: the
    /// only case that draws from `rng`). The parameter has two values or more.
    pub fn step_from(&self, cur: usize, rng: &mut impl Rng) -> usize {
        if cur == 0 {
            1
        } else if cur + 1 == self.values.len() || rng.gen_bool(0.5) {
            cur - 1
        } else {
            cur + 1
        }
    }
}

/// A constraint every config must satisfy, with why.
#[derive(Clone)]
pub struct Rule {
    pub reason: String,
    pub check: Arc<dyn Fn(&Config) -> bool + Send + Sync>,
}

impl fmt::Debug for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Rule({})", self.reason)
    }
}

/// A parameter space: the parameters and the rules between them.
#[derive(Debug, Clone, Default)]
pub struct ParamSpace {
    pub params: Vec<Param>,
    pub rules: Vec<Rule>,
}

/// How many tries a random draw makes before giving up on finding a valid config.
const TRIES: usize = 200;

impl ParamSpace {
    pub fn new() -> ParamSpace {
        ParamSpace::default()
    }

    pub fn param(mut self, name: &str, values: &[i64]) -> ParamSpace {
        self.params.push(Param {
            name: name.into(),
            values: values.to_vec(),
            launch: false,
        });
        self
    }

    /// A parameter the kernel takes at launch, not at compile time (see [`Param::launch`]).
    pub fn launch_param(mut self, name: &str, values: &[i64]) -> ParamSpace {
        self.params.push(Param {
            name: name.into(),
            values: values.to_vec(),
            launch: true,
        });
        self
    }

    /// The values of `cfg`'s launch-time parameters, as a label ("" when there are none): two
    /// configs with the same CUBIN are the same candidate only if this matches too.
    pub fn launch_key(&self, cfg: &Config) -> String {
        self.params
            .iter()
            .filter(|p| p.launch)
            .map(|p| format!("{}={}", p.name, cfg.get(&p.name).unwrap_or_default()))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn rule(
        mut self,
        reason: &str,
        check: impl Fn(&Config) -> bool + Send + Sync + 'static,
    ) -> ParamSpace {
        self.rules.push(Rule {
            reason: reason.into(),
            check: Arc::new(check),
        });
        self
    }

    /// The parameters and their values, without the rules (for landscapes and reports).
    pub fn describe(&self) -> BTreeMap<String, Vec<i64>> {
        self.params
            .iter()
            .map(|p| (p.name.clone(), p.values.clone()))
            .collect()
    }

    /// The reasons of the rules `c` breaks, plus values outside the parameter lists.
    pub fn violations(&self, c: &Config) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for p in &self.params {
            match c.get(&p.name) {
                Some(x) if p.values.contains(&x) => {}
                Some(x) => v.push(format!("{}={x} is not one of {:?}", p.name, p.values)),
                None => v.push(format!("{} is missing", p.name)),
            }
        }
        if v.is_empty() {
            v.extend(
                self.rules
                    .iter()
                    .filter(|r| !(r.check)(c))
                    .map(|r| r.reason.clone()),
            );
        }
        v
    }

    pub fn is_valid(&self, c: &Config) -> bool {
        self.violations(c).is_empty()
    }

    /// Points before the rules: the product of the value counts.
    pub fn raw_size(&self) -> u128 {
        self.params.iter().map(|p| p.values.len() as u128).product()
    }

    fn at(&self, mut index: u128) -> Config {
        let mut pairs = Vec::with_capacity(self.params.len());
        // The last parameter varies fastest.
        let mut idx = vec![0usize; self.params.len()];
        for (i, p) in self.params.iter().enumerate().rev() {
            let n = p.values.len() as u128;
            idx[i] = (index % n) as usize;
            index /= n;
        }
        for (p, &i) in self.params.iter().zip(&idx) {
            pairs.push((p.name.clone(), p.values[i]));
        }
        Config(pairs)
    }

    /// Every valid config, in a fixed order (the last parameter varies fastest).
    pub fn enumerate(&self) -> Vec<Config> {
        if self.params.iter().any(|p| p.values.is_empty()) {
            return Vec::new();
        }
        (0..self.raw_size())
            .map(|i| self.at(i))
            .filter(|c| self.is_valid(c))
            .collect()
    }

    /// A uniformly drawn valid config, or `None` when none was found.
    pub fn sample(&self, rng: &mut impl Rng) -> Option<Config> {
        if self.params.iter().any(|p| p.values.is_empty()) {
            return None;
        }
        for _ in 0..TRIES {
            let c = Config(
                self.params
                    .iter()
                    .map(|p| (p.name.clone(), *p.values.choose(rng).unwrap_or(&0)))
                    .collect(),
            );
            if self.is_valid(&c) {
                return Some(c);
            }
        }
        // A sparse space: fall back to drawing from the enumeration (small spaces only).
        if self.raw_size() <= 1 << 20 {
            return self.enumerate().choose(rng).cloned();
        }
        None
    }

    /// A valid neighbour of `c`: one or two parameters moved, mostly to an adjacent value.
    pub fn mutate(&self, c: &Config, rng: &mut impl Rng) -> Option<Config> {
        let movable: Vec<&Param> = self.params.iter().filter(|p| p.values.len() > 1).collect();
        if movable.is_empty() {
            return None;
        }
        for _ in 0..TRIES {
            let mut m = c.clone();
            let changes = if rng.gen_bool(0.25) { 2 } else { 1 };
            for _ in 0..changes {
                let p = movable[rng.gen_range(0..movable.len())];
                let cur = p.index_in(&m);
                let next = if rng.gen_bool(0.7) {
                    // a step to a neighbouring value
                    p.step_from(cur, rng)
                } else {
                    rng.gen_range(0..p.values.len())
                };
                m.set(&p.name, p.values[next]);
            }
            if m != *c && self.is_valid(&m) {
                return Some(m);
            }
        }
        None
    }

    /// Every valid config one step away from `c`: one parameter moved to an adjacent value.
    pub fn neighbours(&self, c: &Config) -> Vec<Config> {
        let mut out = Vec::new();
        for p in &self.params {
            let Some(cur) = p.values.iter().position(|&v| Some(v) == c.get(&p.name)) else {
                continue;
            };
            for next in [cur.wrapping_sub(1), cur + 1] {
                if let Some(&v) = p.values.get(next) {
                    let mut n = c.clone();
                    n.set(&p.name, v);
                    if self.is_valid(&n) {
                        out.push(n);
                    }
                }
            }
        }
        out
    }

    /// Uniform crossover: each parameter from one parent or the other; `None` if no valid child
    /// was found.
    pub fn crossover(&self, a: &Config, b: &Config, rng: &mut impl Rng) -> Option<Config> {
        for _ in 0..TRIES / 4 {
            let c = Config(
                self.params
                    .iter()
                    .map(|p| {
                        let from = if rng.gen_bool(0.5) { a } else { b };
                        (p.name.clone(), from.get(&p.name).unwrap_or(p.values[0]))
                    })
                    .collect(),
            );
            if self.is_valid(&c) {
                return Some(c);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    fn space() -> ParamSpace {
        ParamSpace::new()
            .param("BM", &[64, 128, 256])
            .param("BN", &[64, 128, 256])
            .param("S", &[2, 3, 4])
            .rule("BM * BN at most 128 * 256", |c| {
                c.get("BM").unwrap() * c.get("BN").unwrap() <= 128 * 256
            })
    }

    #[test]
    fn enumerate_keeps_only_valid_configs_in_order() {
        let all = space().enumerate();
        assert_eq!(all.len(), (9 - 1) * 3);
        assert_eq!(all[0].label(), "BM=64,BN=64,S=2");
        assert_eq!(all[1].label(), "BM=64,BN=64,S=3");
        assert!(!all
            .iter()
            .any(|c| c.get("BM") == Some(256) && c.get("BN") == Some(256)));
    }

    #[test]
    fn violations_name_the_rule() {
        let s = space();
        let bad = Config::new(&[("BM", 256), ("BN", 256), ("S", 2)]);
        assert_eq!(
            s.violations(&bad),
            vec!["BM * BN at most 128 * 256".to_string()]
        );
        let off = Config::new(&[("BM", 100), ("BN", 64), ("S", 2)]);
        assert!(s.violations(&off)[0].contains("BM=100"));
    }

    #[test]
    fn sample_mutate_crossover_stay_valid() {
        let s = space();
        let mut rng = SmallRng::seed_from_u64(7);
        for _ in 0..200 {
            let a = s.sample(&mut rng).unwrap();
            let b = s.sample(&mut rng).unwrap();
            assert!(s.is_valid(&a));
            let m = s.mutate(&a, &mut rng).unwrap();
            assert!(s.is_valid(&m) && m != a);
            let c = s.crossover(&a, &b, &mut rng).unwrap();
            assert!(s.is_valid(&c));
            for (k, v) in &c.0 {
                assert!(a.get(k) == Some(*v) || b.get(k) == Some(*v));
            }
        }
    }

    #[test]
    fn neighbours_are_one_valid_step_away() {
        let s = space();
        let n = s.neighbours(&Config::new(&[("BM", 128), ("BN", 128), ("S", 2)]));
        let labels: Vec<String> = n.iter().map(Config::label).collect();
        // BN=256 would be fine; BM=256 with BN=128 too; S has one neighbour
        assert_eq!(
            labels,
            [
                "BM=64,BN=128,S=2",
                "BM=256,BN=128,S=2",
                "BM=128,BN=64,S=2",
                "BM=128,BN=256,S=2",
                "BM=128,BN=128,S=3"
            ]
        );
        let corner = s.neighbours(&Config::new(&[("BM", 256), ("BN", 128), ("S", 4)]));
        assert!(!corner.iter().any(|c| c.get("BN") == Some(256)));
    }

    #[test]
    fn labels_round_trip_and_configs_hash() {
        let c = Config::new(&[("BM", 128), ("BN", 256)]);
        assert_eq!(c.label(), "BM=128,BN=256");
        assert_eq!(Config::parse(&c.label()).unwrap(), c);
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(serde_json::from_str::<Config>(&json).unwrap(), c);
        let set: std::collections::HashSet<_> = [c.clone(), c].into_iter().collect();
        assert_eq!(set.len(), 1);
        assert!(Config::parse("BM").is_err());
    }
}
