//! The CUDA sources under `kernels/`, embedded in the binary, and the include graph between them
//! (our own headers only: device code needs no toolkit headers).

/// Every file under `kernels/`, as (path relative to `kernels/`, text).
pub static FILES: &[(&str, &str)] = &[
    (
        "common/types.cuh",
        include_str!("../../kernels/common/types.cuh"),
    ),
    (
        "common/gemm_args.cuh",
        include_str!("../../kernels/common/gemm_args.cuh"),
    ),
    (
        "common/epilogue.cuh",
        include_str!("../../kernels/common/epilogue.cuh"),
    ),
    (
        "common/cp_async.cuh",
        include_str!("../../kernels/common/cp_async.cuh"),
    ),
    (
        "common/cp_async_tile.cuh",
        include_str!("../../kernels/common/cp_async_tile.cuh"),
    ),
    (
        "common/mma_sync.cuh",
        include_str!("../../kernels/common/mma_sync.cuh"),
    ),
    (
        "common/wgmma.cuh",
        include_str!("../../kernels/common/wgmma.cuh"),
    ),
    (
        "common/mbarrier.cuh",
        include_str!("../../kernels/common/mbarrier.cuh"),
    ),
    (
        "common/tma.cuh",
        include_str!("../../kernels/common/tma.cuh"),
    ),
    (
        "common/stmatrix.cuh",
        include_str!("../../kernels/common/stmatrix.cuh"),
    ),
    (
        "common/c_staging.cuh",
        include_str!("../../kernels/common/c_staging.cuh"),
    ),
    (
        "common/c_rows.cuh",
        include_str!("../../kernels/common/c_rows.cuh"),
    ),
    (
        "common/quad_transpose.cuh",
        include_str!("../../kernels/common/quad_transpose.cuh"),
    ),
    (
        "common/swizzle.cuh",
        include_str!("../../kernels/common/swizzle.cuh"),
    ),
    (
        "common/grid_dep.cuh",
        include_str!("../../kernels/common/grid_dep.cuh"),
    ),
    (
        "common/fast_math.cuh",
        include_str!("../../kernels/common/fast_math.cuh"),
    ),
    (
        "common/mem_ops.cuh",
        include_str!("../../kernels/common/mem_ops.cuh"),
    ),
    (
        "common/ring.cuh",
        include_str!("../../kernels/common/ring.cuh"),
    ),
    (
        "common/ws_pipeline.cuh",
        include_str!("../../kernels/common/ws_pipeline.cuh"),
    ),
    (
        "common/gemm_ws.cuh",
        include_str!("../../kernels/common/gemm_ws.cuh"),
    ),
    (
        "common/gemm_units.cuh",
        include_str!("../../kernels/common/gemm_units.cuh"),
    ),
    (
        "common/stamp.cuh",
        include_str!("../../kernels/common/stamp.cuh"),
    ),
    (
        "common/gemm_trace.cuh",
        include_str!("../../kernels/common/gemm_trace.cuh"),
    ),
    (
        "common/split_k.cuh",
        include_str!("../../kernels/common/split_k.cuh"),
    ),
    (
        "common/split_k_cluster.cuh",
        include_str!("../../kernels/common/split_k_cluster.cuh"),
    ),
    (
        "common/wgmma_epilogue.cuh",
        include_str!("../../kernels/common/wgmma_epilogue.cuh"),
    ),
    (
        "common/tma_3d.cuh",
        include_str!("../../kernels/common/tma_3d.cuh"),
    ),
    (
        "common/tma_5d.cuh",
        include_str!("../../kernels/common/tma_5d.cuh"),
    ),
    (
        "common/wgmma_ss.cuh",
        include_str!("../../kernels/common/wgmma_ss.cuh"),
    ),
    (
        "common/wgmma_rs.cuh",
        include_str!("../../kernels/common/wgmma_rs.cuh"),
    ),
    ("moe/sched.cuh", include_str!("../../kernels/moe/sched.cuh")),
    ("moe/trace.cuh", include_str!("../../kernels/moe/trace.cuh")),
    (
        "moe/epilogue.cuh",
        include_str!("../../kernels/moe/epilogue.cuh"),
    ),
    (
        "moe/tile_prefix.cu",
        include_str!("../../kernels/moe/tile_prefix.cu"),
    ),
    (
        "moe/gather.cuh",
        include_str!("../../kernels/moe/gather.cuh"),
    ),
    ("moe/route.cu", include_str!("../../kernels/moe/route.cu")),
    (
        "moe/gather_rows.cu",
        include_str!("../../kernels/moe/gather_rows.cu"),
    ),
    (
        "moe/combine.cu",
        include_str!("../../kernels/moe/combine.cu"),
    ),
    (
        "moe/grouped_gemm.cu",
        include_str!("../../kernels/moe/grouped_gemm.cu"),
    ),
    (
        "moe/grouped_swapab.cu",
        include_str!("../../kernels/moe/grouped_swapab.cu"),
    ),
    (
        "moe/swiglu_dual.cu",
        include_str!("../../kernels/moe/swiglu_dual.cu"),
    ),
    (
        "common/fp8_promote.cuh",
        include_str!("../../kernels/common/fp8_promote.cuh"),
    ),
    (
        "moe/fp8_args.cuh",
        include_str!("../../kernels/moe/fp8_args.cuh"),
    ),
    (
        "moe/fp8_grouped.cu",
        include_str!("../../kernels/moe/fp8_grouped.cu"),
    ),
    (
        "moe/fp8_swiglu.cu",
        include_str!("../../kernels/moe/fp8_swiglu.cu"),
    ),
    (
        "common/bulk_copy.cuh",
        include_str!("../../kernels/common/bulk_copy.cuh"),
    ),
    (
        "moe/fp4_weights.cuh",
        include_str!("../../kernels/moe/fp4_weights.cuh"),
    ),
    (
        "moe/fp4_experts.cuh",
        include_str!("../../kernels/moe/fp4_experts.cuh"),
    ),
    (
        "moe/fp4_epilogue.cuh",
        include_str!("../../kernels/moe/fp4_epilogue.cuh"),
    ),
    (
        "moe/fp4_order.cuh",
        include_str!("../../kernels/moe/fp4_order.cuh"),
    ),
    (
        "moe/fp4_experts.cu",
        include_str!("../../kernels/moe/fp4_experts.cu"),
    ),
    (
        "moe/fp4_experts_dq.cu",
        include_str!("../../kernels/moe/fp4_experts_dq.cu"),
    ),
    (
        "moe/fp4_experts_w4a8.cu",
        include_str!("../../kernels/moe/fp4_experts_w4a8.cu"),
    ),
    (
        "moe/fp4_experts_w4a8_wide.cu",
        include_str!("../../kernels/moe/fp4_experts_w4a8_wide.cu"),
    ),
    (
        "moe/w4a8_lean.cuh",
        include_str!("../../kernels/moe/w4a8_lean.cuh"),
    ),
    (
        "moe/w4a8_args.cuh",
        include_str!("../../kernels/moe/w4a8_args.cuh"),
    ),
    (
        "moe/w4a8_smem.cuh",
        include_str!("../../kernels/moe/w4a8_smem.cuh"),
    ),
    (
        "gemm/simt_naive.cu",
        include_str!("../../kernels/gemm/simt_naive.cu"),
    ),
    (
        "gemm/simt_tiled.cu",
        include_str!("../../kernels/gemm/simt_tiled.cu"),
    ),
    (
        "gemm/wgmma_tma_ws.cu",
        include_str!("../../kernels/gemm/wgmma_tma_ws.cu"),
    ),
    (
        "gemm/wgmma_tma_ws_pingpong.cu",
        include_str!("../../kernels/gemm/wgmma_tma_ws_pingpong.cu"),
    ),
    (
        "gemm/pack_rows.cu",
        include_str!("../../kernels/gemm/pack_rows.cu"),
    ),
    (
        "gemm/small_k.cu",
        include_str!("../../kernels/gemm/small_k.cu"),
    ),
    (
        "gemm/transpose_rows.cu",
        include_str!("../../kernels/gemm/transpose_rows.cu"),
    ),
    (
        "harness/counter_fill.cu",
        include_str!("../../kernels/harness/counter_fill.cu"),
    ),
    (
        "harness/gemm_reference.cu",
        include_str!("../../kernels/harness/gemm_reference.cu"),
    ),
    (
        "harness/l2_read_flush.cu",
        include_str!("../../kernels/harness/l2_read_flush.cu"),
    ),
    (
        "gemm/mma_sync.cu",
        include_str!("../../kernels/gemm/mma_sync.cu"),
    ),
    (
        "gemm/wgmma_cp_async.cu",
        include_str!("../../kernels/gemm/wgmma_cp_async.cu"),
    ),
    (
        "gemm/wgmma_tma.cu",
        include_str!("../../kernels/gemm/wgmma_tma.cu"),
    ),
    (
        "attention/attn_args.cuh",
        include_str!("../../kernels/attention/attn_args.cuh"),
    ),
    (
        "attention/softmax.cu",
        include_str!("../../kernels/attention/softmax.cu"),
    ),
    (
        "attention/fa2_mma_sync.cu",
        include_str!("../../kernels/attention/fa2_mma_sync.cu"),
    ),
    (
        "attention/tma_4d.cuh",
        include_str!("../../kernels/attention/tma_4d.cuh"),
    ),
    (
        "attention/window.cuh",
        include_str!("../../kernels/attention/window.cuh"),
    ),
    (
        "attention/online_softmax.cuh",
        include_str!("../../kernels/attention/online_softmax.cuh"),
    ),
    (
        "attention/mma_sync_warp.cuh",
        include_str!("../../kernels/attention/mma_sync_warp.cuh"),
    ),
    (
        "attention/fa3_wgmma.cu",
        include_str!("../../kernels/attention/fa3_wgmma.cu"),
    ),
    (
        "attention/attn_bwd_args.cuh",
        include_str!("../../kernels/attention/attn_bwd_args.cuh"),
    ),
    (
        "attention/bwd_prep.cu",
        include_str!("../../kernels/attention/bwd_prep.cu"),
    ),
    (
        "attention/bwd_dq.cuh",
        include_str!("../../kernels/attention/bwd_dq.cuh"),
    ),
    (
        "attention/bwd_fa2_mma_sync.cu",
        include_str!("../../kernels/attention/bwd_fa2_mma_sync.cu"),
    ),
    (
        "attention/bwd_fa3_wgmma.cu",
        include_str!("../../kernels/attention/bwd_fa3_wgmma.cu"),
    ),
    (
        "attention/bwd_wgmma.cuh",
        include_str!("../../kernels/attention/bwd_wgmma.cuh"),
    ),
    (
        "attention/bwd_fa3_block.cuh",
        include_str!("../../kernels/attention/bwd_fa3_block.cuh"),
    ),
    (
        "attention/bwd_fa3_bulk_dq.cu",
        include_str!("../../kernels/attention/bwd_fa3_bulk_dq.cu"),
    ),
    (
        "attention/bwd_fa3_tma_dq.cu",
        include_str!("../../kernels/attention/bwd_fa3_tma_dq.cu"),
    ),
    (
        "attention/bwd_dq_tile.cuh",
        include_str!("../../kernels/attention/bwd_dq_tile.cuh"),
    ),
    (
        "attention/bwd_dq_fused.cuh",
        include_str!("../../kernels/attention/bwd_dq_fused.cuh"),
    ),
    (
        "attention/bwd_dq_stage.cuh",
        include_str!("../../kernels/attention/bwd_dq_stage.cuh"),
    ),
    (
        "attention/bwd_tail.cuh",
        include_str!("../../kernels/attention/bwd_tail.cuh"),
    ),
    (
        "attention/bwd_varlen_grid.cuh",
        include_str!("../../kernels/attention/bwd_varlen_grid.cuh"),
    ),
    (
        "attention/bwd_fa3_lookahead.cu",
        include_str!("../../kernels/attention/bwd_fa3_lookahead.cu"),
    ),
    (
        "attention/bwd_fa3_d256.cu",
        include_str!("../../kernels/attention/bwd_fa3_d256.cu"),
    ),
    (
        "attention/decode_args.cuh",
        include_str!("../../kernels/attention/decode_args.cuh"),
    ),
    (
        "attention/decode_paged.cu",
        include_str!("../../kernels/attention/decode_paged.cu"),
    ),
    (
        "attention/decode_combine.cu",
        include_str!("../../kernels/attention/decode_combine.cu"),
    ),
    (
        "attention/kv_append.cu",
        include_str!("../../kernels/attention/kv_append.cu"),
    ),
    (
        "pointwise/rmsnorm.cu",
        include_str!("../../kernels/pointwise/rmsnorm.cu"),
    ),
    (
        "pointwise/rope.cu",
        include_str!("../../kernels/pointwise/rope.cu"),
    ),
    (
        "common/fp8.cuh",
        include_str!("../../kernels/common/fp8.cuh"),
    ),
    (
        "quant/fp8_convert.cu",
        include_str!("../../kernels/quant/fp8_convert.cu"),
    ),
    (
        "quant/fp8_quant.cu",
        include_str!("../../kernels/quant/fp8_quant.cu"),
    ),
    (
        "common/wgmma_fp8.cuh",
        include_str!("../../kernels/common/wgmma_fp8.cuh"),
    ),
    (
        "common/wgmma_fp8_rs.cuh",
        include_str!("../../kernels/common/wgmma_fp8_rs.cuh"),
    ),
    (
        "gemm/fp8_wgmma.cu",
        include_str!("../../kernels/gemm/fp8_wgmma.cu"),
    ),
    (
        "common/fp4.cuh",
        include_str!("../../kernels/common/fp4.cuh"),
    ),
    (
        "quant/fp4_quant.cu",
        include_str!("../../kernels/quant/fp4_quant.cu"),
    ),
    (
        "quant/fp4_dequant.cu",
        include_str!("../../kernels/quant/fp4_dequant.cu"),
    ),
    (
        "gemm/nvfp4_gemv.cu",
        include_str!("../../kernels/gemm/nvfp4_gemv.cu"),
    ),
    (
        "gemm/nvfp4_gemv_pack.cu",
        include_str!("../../kernels/gemm/nvfp4_gemv_pack.cu"),
    ),
];

/// The text of `path` (relative to `kernels/`).
pub fn get(path: &str) -> Option<&'static str> {
    FILES.iter().find(|(p, _)| *p == path).map(|(_, s)| *s)
}

/// The quoted includes of `text`, in order.
pub fn includes(text: &str) -> Vec<&str> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let rest = l.strip_prefix("#include")?.trim_start();
            let rest = rest.strip_prefix('"')?;
            rest.split('"').next()
        })
        .collect()
}

/// `path` and every header it reaches, each once, in a stable order.
pub fn closure(path: &str) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    let mut stack = vec![path.to_string()];
    while let Some(p) = stack.pop() {
        if let Some((name, text)) = FILES.iter().find(|(n, _)| *n == p) {
            if out.contains(name) {
                continue;
            }
            out.push(name);
            for inc in includes(text) {
                stack.push(inc.to_string());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn includes_are_parsed_and_resolved() {
        assert_eq!(
            includes("#include \"common/types.cuh\"\n  #include \"x.cuh\"\n#include <y>"),
            vec!["common/types.cuh", "x.cuh"]
        );
        for (path, text) in FILES {
            for inc in includes(text) {
                assert!(
                    get(inc).is_some(),
                    "{path} includes {inc}, which is not embedded"
                );
            }
        }
    }

    #[test]
    fn device_code_includes_no_toolkit_headers() {
        for (path, text) in FILES {
            assert!(
                !text.contains("#include <"),
                "{path} includes a system header"
            );
        }
    }

    #[test]
    fn kernels_default_only_the_defines_the_host_may_leave_out() {
        // A kernel's default for a define the host always passes can disagree with the host's
        // (KILN_EPI_DEFER defaulted to 0 in the kernel and 1 on the host): kernels stop with
        // #error on a missing one instead. These the host passes for some variants only,
        // and their defaults are the host's "absent".
        let mut defaults = Vec::new();
        for (path, text) in FILES {
            let lines: Vec<&str> = text.lines().map(str::trim).collect();
            for w in lines.windows(2) {
                if let (Some(name), Some(def)) =
                    (w[0].strip_prefix("#ifndef "), w[1].strip_prefix("#define "))
                {
                    if def.split_whitespace().next() == Some(name) {
                        defaults.push((*path, name));
                    }
                }
            }
        }
        assert_eq!(
            defaults,
            vec![
                ("common/gemm_trace.cuh", "KILN_TRACE"),
                ("moe/trace.cuh", "KILN_MOE_TRACE"),
                ("moe/fp4_experts_w4a8.cu", "KILN_W4A8_SX"),
                ("moe/fp4_experts_w4a8.cu", "KILN_W4A8_DEC"),
                ("moe/fp4_experts_w4a8.cu", "KILN_W4A8_ASTAGES"),
                ("gemm/wgmma_tma_ws.cu", "KILN_CPA"),
                ("gemm/wgmma_tma_ws.cu", "KILN_C_T"),
                ("gemm/mma_sync.cu", "KILN_ELEM_LOADS"),
                ("gemm/fp8_wgmma.cu", "KILN_PINGPONG"),
                ("gemm/fp8_wgmma.cu", "KILN_WHOLE")
            ]
        );
    }
}
