//! Tuned configs as data: the key a tuned config is filed under (GPU, op, version, dtypes, layout,
//! shape class) and the table of them that a context hands its ops, who know nothing of tuning.

use std::collections::HashMap;

use super::attention::AttentionProblem;
use super::attention_backward::BackwardProblem;
use super::gemm::GemmProblem;
use super::space::Config;
use crate::device::DeviceInfo;

/// Problems that one tuned config serves: M, N and K bucketed by the next power of two, M of 64 or
/// less marked apart (skinny GEMMs want other tiles even when N and K are large), and rows that
/// do not start on 128 bytes marked apart (TMA boxes then straddle cache lines: on an H200,
/// 4096x4096x4088 ran at 492 TFLOPS with the 128x256 single-CTA config tuned for 4096^3 and at
/// 716 with CTA pairs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ShapeClass {
    pub m_log2: u32,
    pub n_log2: u32,
    pub k_log2: u32,
    pub small_m: bool,
    pub rows_unaligned: bool,
}

fn bucket(x: usize) -> u32 {
    x.max(1).next_power_of_two().trailing_zeros()
}

impl ShapeClass {
    pub fn of(p: &GemmProblem) -> ShapeClass {
        ShapeClass {
            m_log2: bucket(p.m),
            n_log2: bucket(p.n),
            k_log2: bucket(p.k),
            small_m: p.m <= 64,
            rows_unaligned: [
                p.lda * p.input.size(),
                p.ldb * p.input.size(),
                p.ldc * p.output.size(),
            ]
            .iter()
            .any(|bytes| bytes % 128 != 0),
        }
    }
    /// `m<=2^12,n<=2^12,k<=2^12` (with `,small_m` for M <= 64, `,rows_unaligned` for rows not
    /// on 128 bytes).
    pub fn label(&self) -> String {
        let mut s = format!(
            "m<=2^{},n<=2^{},k<=2^{}",
            self.m_log2, self.n_log2, self.k_log2
        );
        if self.small_m {
            s += ",small_m";
        }
        if self.rows_unaligned {
            s += ",rows_unaligned";
        }
        s
    }
}

/// Attention problems that one tuned config serves: the head dim (the kernel is specialised for
/// it), the mask, the GQA group, and the query length, key length and batch x query heads by the
/// next power of two (they set the work items per SM and the keys each walks).
pub fn attention_class(p: &AttentionProblem) -> String {
    let mut s = format!(
        "d={},sq<=2^{},skv<=2^{},bh<=2^{}",
        p.head_dim,
        bucket(p.seqlen_q),
        bucket(p.seqlen_kv),
        bucket(p.batch * p.heads_q)
    );
    if p.group() > 1 {
        s += &format!(",group={}", p.group());
    }
    if p.causal {
        s += ",causal";
    }
    s
}

/// Everything a tuned config is specific to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TuneKey {
    pub gpu: String,
    pub sm_count: u32,
    pub op: String,
    pub version: String,
    /// `bf16->bf16`
    pub dtype: String,
    pub layout: String,
    pub class: String,
}

impl TuneKey {
    pub fn new(dev: &DeviceInfo, op: &str, version: &str, p: &GemmProblem) -> TuneKey {
        TuneKey {
            gpu: dev.name.clone(),
            sm_count: dev.sm_count,
            op: op.into(),
            version: version.into(),
            dtype: format!("{}->{}", p.input, p.output),
            layout: p.layout.to_string(),
            class: ShapeClass::of(p).label(),
        }
    }

    /// The key of an attention problem: op `attention`, the dtype, the layout (BSHD/BHSD) and
    /// [`attention_class`].
    pub fn attention(dev: &DeviceInfo, version: &str, p: &AttentionProblem) -> TuneKey {
        TuneKey {
            gpu: dev.name.clone(),
            sm_count: dev.sm_count,
            op: "attention".into(),
            version: version.into(),
            dtype: p.dtype.to_string(),
            layout: p.layout.to_string(),
            class: attention_class(p),
        }
    }

    /// The key of an attention backward: op `attention_backward`, the forward's dtype, layout
    /// and class, `,deterministic` added when it is (the ordered adds run other launches).
    pub fn attention_backward(dev: &DeviceInfo, version: &str, p: &BackwardProblem) -> TuneKey {
        let mut k = TuneKey::attention(dev, version, &p.attn);
        k.op = "attention_backward".into();
        if p.deterministic {
            k.class += ",deterministic";
        }
        k
    }
}

/// Tuned configs by [`TuneKey`], with the TFLOPS each measured when tuned. An empty table (the
/// default) leaves every version to its heuristic.
#[derive(Debug, Clone, Default)]
pub struct TunedTable {
    entries: HashMap<TuneKey, (Config, Option<f64>)>,
}

impl TunedTable {
    /// No tuned configs: every version runs its heuristic.
    pub fn empty() -> TunedTable {
        TunedTable::default()
    }

    /// The table of `entries` (config and measured TFLOPS by key).
    pub fn from_entries(entries: HashMap<TuneKey, (Config, Option<f64>)>) -> TunedTable {
        TunedTable { entries }
    }

    /// Files `cfg` (which measured `tflops`) under `key`, replacing what was there.
    pub fn insert(&mut self, key: TuneKey, cfg: Config, tflops: Option<f64>) {
        self.entries.insert(key, (cfg, tflops));
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every entry: key, config and the TFLOPS it measured.
    pub fn entries(&self) -> impl Iterator<Item = (&TuneKey, &Config, Option<f64>)> {
        self.entries.iter().map(|(k, (c, t))| (k, c, *t))
    }

    /// The tuned config of GEMM `version` for `p` on `dev`.
    pub fn gemm(&self, dev: &DeviceInfo, version: &str, p: &GemmProblem) -> Option<Config> {
        self.gemm_entry(dev, version, p).map(|(c, _)| c.clone())
    }

    /// The TFLOPS GEMM `version`'s tuned config measured for `p`'s shape class on `dev`.
    pub fn gemm_tflops(&self, dev: &DeviceInfo, version: &str, p: &GemmProblem) -> Option<f64> {
        self.gemm_entry(dev, version, p).and_then(|(_, t)| *t)
    }

    /// The tuned config of attention `version` for `p` on `dev`.
    pub fn attention(
        &self,
        dev: &DeviceInfo,
        version: &str,
        p: &AttentionProblem,
    ) -> Option<Config> {
        if self.entries.is_empty() {
            return None;
        }
        self.entries
            .get(&TuneKey::attention(dev, version, p))
            .map(|(c, _)| c.clone())
    }

    /// The tuned knobs of attention backward `version` for `p` on `dev`.
    pub fn attention_backward(
        &self,
        dev: &DeviceInfo,
        version: &str,
        p: &BackwardProblem,
    ) -> Option<Config> {
        self.backward_entry(dev, version, p).map(|(c, _)| c.clone())
    }

    /// The TFLOPS attention backward `version`'s tuned knobs measured for `p`'s class on `dev`.
    pub fn attention_backward_tflops(
        &self,
        dev: &DeviceInfo,
        version: &str,
        p: &BackwardProblem,
    ) -> Option<f64> {
        self.backward_entry(dev, version, p).and_then(|(_, t)| *t)
    }

    fn backward_entry(
        &self,
        dev: &DeviceInfo,
        version: &str,
        p: &BackwardProblem,
    ) -> Option<&(Config, Option<f64>)> {
        if self.entries.is_empty() {
            return None;
        }
        self.entries
            .get(&TuneKey::attention_backward(dev, version, p))
    }

    fn gemm_entry(
        &self,
        dev: &DeviceInfo,
        version: &str,
        p: &GemmProblem,
    ) -> Option<&(Config, Option<f64>)> {
        // (most tables are empty: no key is built for them)
        if self.entries.is_empty() {
            return None;
        }
        self.entries.get(&TuneKey::new(dev, "gemm", version, p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gemm::{DType, Layout};

    #[test]
    fn shape_classes_bucket_by_powers_of_two() {
        let p = |m, n, k| GemmProblem::new(m, n, k, Layout::RC, DType::Bf16, DType::Bf16);
        assert_eq!(
            ShapeClass::of(&p(4096, 4096, 4096)),
            ShapeClass::of(&p(3000, 2112, 4032))
        );
        assert_ne!(
            ShapeClass::of(&p(4096, 4096, 4096)),
            ShapeClass::of(&p(4097, 4096, 4096))
        );
        assert_eq!(
            ShapeClass::of(&p(4096, 4096, 4096)).label(),
            "m<=2^12,n<=2^12,k<=2^12"
        );
        assert!(ShapeClass::of(&p(16, 4096, 4096)).small_m);
        // 4088 elements = 8176 bytes per row: TMA boxes straddle lines, a class of its own
        assert!(ShapeClass::of(&p(4096, 4096, 4088)).rows_unaligned);
        assert!(!ShapeClass::of(&p(4096, 4096, 4096)).rows_unaligned);
        assert_ne!(
            ShapeClass::of(&p(4096, 4096, 4096)),
            ShapeClass::of(&p(4096, 4096, 4088))
        );
        assert!(ShapeClass::of(&p(16, 4096, 4096))
            .label()
            .ends_with("small_m"));
    }

    #[test]
    fn attention_keys_separate_head_dim_mask_and_length_classes() {
        let dev = DeviceInfo::h100_sxm();
        let p = AttentionProblem::new(4, 16, 4096, 128);
        let k = TuneKey::attention(&dev, "fa3_wgmma", &p);
        assert_eq!(k.op, "attention");
        assert_eq!((k.dtype.as_str(), k.layout.as_str()), ("bf16", "BSHD"));
        assert_eq!(k.class, "d=128,sq<=2^12,skv<=2^12,bh<=2^6");
        // same class: 3000 keys, 2x32 heads
        let alike = AttentionProblem::new(2, 32, 3000, 128);
        assert_eq!(TuneKey::attention(&dev, "fa3_wgmma", &alike), k);
        for other in [
            AttentionProblem { causal: true, ..p },
            AttentionProblem::new(4, 16, 4096, 64),
            AttentionProblem::new(2, 16, 8192, 128),
            AttentionProblem { heads_kv: 4, ..p },
        ] {
            assert_ne!(
                TuneKey::attention(&dev, "fa3_wgmma", &other),
                k,
                "{other:?}"
            );
        }
    }

    #[test]
    fn a_table_answers_for_its_key_only() {
        let h100 = DeviceInfo::h100_sxm();
        let p = GemmProblem::new(4096, 4096, 4096, Layout::RC, DType::Bf16, DType::Bf16);
        let cfg = Config::new(&[("BM", 128), ("BN", 256)]);
        let mut t = TunedTable::empty();
        assert_eq!(t.gemm(&h100, "mma_sync", &p), None);
        t.insert(
            TuneKey::new(&h100, "gemm", "mma_sync", &p),
            cfg.clone(),
            Some(500.0),
        );
        assert_eq!(t.len(), 1);
        // the same shape class, another shape
        let alike = GemmProblem::new(3000, 2112, 4032, Layout::RC, DType::Bf16, DType::Bf16);
        assert_eq!(t.gemm(&h100, "mma_sync", &alike), Some(cfg));
        assert_eq!(t.gemm_tflops(&h100, "mma_sync", &p), Some(500.0));
        // another version, layout, GPU or op: no entry
        assert_eq!(t.gemm(&h100, "wgmma_tma_ws", &p), None);
        let cr = GemmProblem {
            layout: Layout::CR,
            ..p
        };
        assert_eq!(t.gemm(&h100, "mma_sync", &cr), None);
        let fewer_sms = DeviceInfo {
            sm_count: 114,
            ..h100.clone()
        };
        assert_eq!(t.gemm(&fewer_sms, "mma_sync", &p), None);
        let attn = AttentionProblem::new(4, 16, 4096, 128);
        assert_eq!(t.attention(&h100, "mma_sync", &attn), None);
    }

    #[test]
    fn backward_keys_keep_the_forward_class_and_set_deterministic_runs_apart() {
        let h100 = DeviceInfo::h100_sxm();
        let a = AttentionProblem::new(2, 16, 8192, 128);
        let (free, det) = (
            BackwardProblem::new(a, false),
            BackwardProblem::new(a, true),
        );
        let k = TuneKey::attention_backward(&h100, "bwd_fa3_tail", &free);
        assert_eq!(k.op, "attention_backward");
        assert_eq!(k.class, "d=128,sq<=2^13,skv<=2^13,bh<=2^5");
        let kd = TuneKey::attention_backward(&h100, "bwd_fa3_tail", &det);
        assert_eq!(kd.class, "d=128,sq<=2^13,skv<=2^13,bh<=2^5,deterministic");
        let mut t = TunedTable::empty();
        let cfg = Config::new(&[("TAIL", 4)]);
        t.insert(k, cfg.clone(), Some(560.0));
        assert_eq!(
            t.attention_backward(&h100, "bwd_fa3_tail", &free),
            Some(cfg)
        );
        assert_eq!(
            t.attention_backward_tflops(&h100, "bwd_fa3_tail", &free),
            Some(560.0)
        );
        assert_eq!(t.attention_backward(&h100, "bwd_fa3_tail", &det), None);
        // the forward's entry of the same class is another key
        assert_eq!(t.attention(&h100, "bwd_fa3_tail", &a), None);
    }
}
