#!/usr/bin/env bash
# The GPU runs worth repeating, one task per call, each a documented sequence of kiln commands.
# For a GPU machine without cargo: build here (`cargo build --release`), take the binary there.
#
#   bash scripts/gpu.sh <task> [args]          bash scripts/gpu.sh help   (this text)
#
#   KILN_BIN  the kiln binary (default target/release/kiln); a file COMMIT beside it, if any,
#             names the commit it was built from (else `git rev-parse HEAD` of this checkout)
#   OUT       where everything goes (default ./gpu-out); task T writes OUT/T/, its store
#             (KILN_STORE) is OUT/kiln.db unless KILN_STORE is set
#   PYTHON    the interpreter that has torch, for the peers (default python3)
#
# Every task writes machine.txt (GPU, cores, date, binary, commit) and the full output of each
# step under OUT/<task>/, prints a short table last (step, exit code, seconds, last line), and
# exits 0 only if every step passed. A device call may be limited to 600 s: run one task per
# call, and split `verify` by op when the three suites do not fit.
#
# Tasks:
#   verify [gemm] [attn] [moe]   the full verify suites (default all three)
#   targets [PASSES]             `kiln bench --set targets` in PASSES passes (default 3; the first
#                                in the set's order, then shuffled), LAYOUTS=RC,CR,RR,CC; table by
#                                scripts/targets-table.py
#   ladder                       `kiln bench --set ladder --all`: every version up the ladder
#   attention                    fa3_wgmma (ATTN_VERSION) at the 18 issue shapes against SDPA's
#                                cuDNN and FlashAttention-2 backends (scripts/peers.py attention),
#                                LAYOUTS (default BSHD; BSHD,BHSD) in ROUNDS rounds (default 1)
#   fp8moe                       the FP8 MoE kernels: `kiln fp8 check`, `kiln fp8 verify --grouped`
#                                (FP8MOE_SUITE=quick|full), then the grouped GEMM 4 x 8192 rows,
#                                N 4096, K 7168 and masked 4 x 256 rows, and the SwiGLU, against
#                                the torch peers (scripts/peers.py fp8moe); table of the ratios;
#                                every feed of the grouped GEMM (FP8MOE_FEEDS, default "ldg t tm tm256":
#                                KILN_FP8_GROUPED) verified and timed beside the default (per layout)
#                                cuDNN and FlashAttention-2 backends (scripts/peers.py attention)
#   backward                     the attention backward: `kiln attn verify --backward` (BWD_SUITE=
#                                full|quick, default full), then kiln (BWD_VERSION, default every
#                                version) at the issue's backward shapes (d128 B2 S8192, d64 and
#                                d256 at S 4k and 16k, causal or not; d128 also deterministic)
#                                against SDPA's cuDNN and FLASH backwards (scripts/peers.py backward)
#                                and B4 H32 S4096 d128 causal
#   bwd-wgmma                    a WGMMA backward (BWD_WGMMA, default bwd_fa3_wgmma; or
#                                bwd_fa3_bulk_dq) before it is the default: its variants compiled,
#                                the quick backward suite, GQA causal S 1000 d128, Sq 700 / Skv
#                                1300 d64 f16 BHSD, deterministic S 1000 (each <= 90 s), then
#                                `backward`'s benches and peers (every version, or BWD_VERSION)
#   bwd-bulk-dq                  bwd_fa3_bulk_dq verified (d128 dQ split by columns and by keys,
#                                KILN_BWD_DQ_KEYS=1; quick suite, GQA causal, ragged BHSD f16,
#                                deterministic; each <= 90 s), then timed beside bwd_fa3_wgmma at
#                                `backward`'s 13 shapes (d128 also by keys) and SDPA's backwards
#   bwd-tma-dq                   bwd_fa3_tma_dq verified as bwd-bulk-dq verifies bwd_fa3_bulk_dq
#                                (both d128 dQ splits, GQA causal, ragged BHSD f16, deterministic;
#                                each <= 90 s), then timed beside bwd_fa3_bulk_dq at `backward`'s
#                                13 shapes (the d128 ones also split by keys) and SDPA's backwards
#                                (about 8 min on an H200)
#   bwd-lookahead                bwd_fa3_lookahead verified as bwd-tma-dq verifies bwd_fa3_tma_dq
#                                (no key split: it has none; also with KILN_BWD_NO_AHEAD=1), then
#                                timed beside bwd_fa3_tma_dq at `backward`'s 13 shapes and SDPA's
#                                backwards, and with KILN_BWD_NO_AHEAD=1 at three (about 8 min on
#                                an H200)
#   bwd-m128                     bwd_fa3_m128 (d64, 128 query rows a step) verified at d64 (each
#                                <= 90 s), then timed beside bwd_fa3_lookahead at `backward`'s 13
#                                shapes (its rows at the d64 ones) and SDPA's backwards (about 5
#                                min on an H200)
#   bwd-dq-late                  bwd_fa3_dq_late verified as bwd-lookahead verifies bwd_fa3_lookahead
#                                (each <= 90 s), then timed beside bwd_fa3_lookahead at `backward`'s
#                                13 shapes and SDPA's backwards (about 6 min on an H200)
#   bwd-d256                     bwd_fa3_d256 verified at d256 (the quick suite's d256 problems, GQA
#                                causal, ragged BHSD f16, deterministic; each <= 90 s), then timed
#                                beside bwd_fa2_mma_sync at the 4 d256 shapes and SDPA's backwards on
#                                them (about 3 min on an H200)
#   bwd-d256-dq                  bwd_fa3_d256_tma (dQ staged in the read ring stage, TMA reduce) and
#                                bwd_fa3_d256_pair (the same, two key blocks a cluster sharing the
#                                loads) verified at d256 as bwd-d256 verifies (plus an odd number of
#                                key blocks, twice deterministic), then each that verified timed
#                                beside bwd_fa3_d256 at the 4 d256 shapes and SDPA's backwards
#                                (about 5 min on an H200)
#   bwd-ordered-eager            bwd_fa3_ordered_eager (the deterministic dQ through a writer warp
#                                in a swizzled fixed order, each counter bumped as soon as its adds
#                                complete) verified (quick suite: every deterministic problem twice,
#                                bitwise; GQA causal, ragged BHSD f16 and two grids of more blocks
#                                than SMs, deterministic; each <= 90 s, after the kernels are
#                                compiled), then the deterministic shapes timed beside the ordered
#                                atomics and the non-deterministic default (~5 min on an H200)
#   bwd-m128-rows                bwd_fa3_m128_rows (d64, 128 query rows a step, dQ split by query
#                                rows) verified at d64 (each <= 90 s), then timed beside
#                                bwd_fa3_m128 and bwd_fa3_lookahead at `backward`'s 4 d64 shapes and
#                                SDPA's backwards on them (about 3 min on an H200)
#   bwd-m128-fma                 bwd_fa3_m128_fma (bwd_fa3_m128_rows with dSᵀ in packed bf16 pairs)
#                                the same way, timed beside bwd_fa3_m128_rows too, and with
#                                KILN_BWD_EXP_POLY=2 and 3 (that many of every 8 exponentials on the
#                                FMA pipe) at B4 H16 S4096 (about 4 min on an H200)
#   bwd-rounds                   the issue's backward shapes in BWD_ROUNDS rounds (default 3), each
#                                one process of scripts/peers.py backward --kiln --interleave: the
#                                default kiln backward (the Python package), its deterministic mode
#                                and SDPA's cuDNN and FLASH backwards timed in turn, one launch each a
#                                round, after BWD_WARMUP_MS (default 1000) of warm-up: the same
#                                (power-capped) clock for all (needs the kiln wheel on PYTHONPATH)
#   bwd-window                   the sliding window's backward (bwd_fa3_lookahead, KILN_BWD_WINDOW;
#                                ledger B13): the forward alone at the split ragged block, then
#                                nine verify problems (each <= 90 s: GQA, Sq != Skv and Sq = Skv
#                                with a ragged block of <= 64 rows, left-only, causal or not, f16
#                                BHSD, keys no row sees, one query row, deterministic bitwise);
#                                the packed backward's suite and a drawn batch of 32 verified, 32
#                                sequences of 128..8192 timed beside one dense backward of the
#                                same work (d128, d128 causal, d64; ledger B14); the window at
#                                d128 beside the dense causal run (about 3 min on an H200)
#   moe                          the MoE verify (MOE_SUITE=quick|full), then the issue's shapes
#                                against torch (scripts/peers.py moe); MOE_SWEEP=1 adds every
#                                grouped-GEMM tile shape
#   fp8                          the dense FP8 GEMM: `kiln fp8 verify --vendor`, DeepSeek-V3's set and
#                                the large shapes against cuBLASLt and torch._scaled_mm, one table;
#                                then verify/bench/plan/inspect/tune --dtype e4m3, the ladder's
#                                FP8 rung and `kiln sanitize --version fp8_wgmma`
#   fp8ab [verify|time]          issue 45's A/B of the dense FP8 GEMM in one call (about 5 min on an
#                                H200): every FP8 variant compiled (warms the JIT cache), `kiln
#                                peak`, `kiln fp8 verify --suite quick` (every compiled config, both
#                                split-K reductions, the K = 16,384 promotion check of each new
#                                tile), the 2x2x624 f16 fuzz failure rerun under every config and
#                                with f32 output, then DeepSeek-V3's 18 shapes with the old rule
#                                (twice: the spread), the new rule and FP8AB_TILES interleaved with
#                                cuBLASLt, and 4096x7168x16384 with every 128-row tile; table of
#                                old / new / best against cuBLASLt and the small-M shapes' share of
#                                the copy bandwidth; `verify` or `time` runs one half (two device
#                                calls of one binary: the check, verify and reruns, then peak and
#                                the timings)
#   fp8ml                        the large-M mainloop's A/B (docs/fp8.md, ledger rows 12-13) in one
#                                call (about 5 min on an H200): the FP8 variants compiled, `kiln fp8
#                                verify --suite quick`, FP8ML_TILES (default 128te 128pte 128ptme
#                                128ptmh, rows 13-14; row 12's: 128te 128pte 128ote 176ose) at
#                                ragged shapes, several units a CTA, a skipping consumer, tiles of
#                                a cluster past M or N, and split-K (FP8ML_SPLIT), then timed twice
#                                each beside cuBLASLt at FP8ML_SHAPES (default 4096x7168x16384,
#                                4096x32768x512, 2048x2048x4096 and 4096x24576x1536), and
#                                DeepSeek-V3's set under the rules `measured` and `large` (twice
#                                each) and the first tile; table of us, TFLOPS and x cuBLASLt per
#                                shape and config, and the geomeans
#   formats-pair OLD_BIN NEW_BIN the verify suites of the format and MoE families, each binary in
#                                turn with --json, paired by scripts/verify-pair.py (the same
#                                checks and verdicts): PAIR_FAMILIES (default pointwise layer
#                                fp8grouped fp8 fp4 nvfp4 w4a8 e4m3; each <= 90 s, about 6 min in all
#                                on an H200), then `kiln fuzz --seed 1` of 20 FP8 problems and 5
#                                layers with each (the same problems, none wrong); PAIR_FAMILIES
#                                may add moe (the bf16 MoE quick suite)
#   benches-pair OLD_BIN NEW_BIN the benches of the format, MoE, layer and pointwise families, each
#                                binary in turn with --json and few repetitions, paired by
#                                scripts/bench-pair.py (the same rows, each with the same keys;
#                                the medians side by side): BENCH_FAMILIES (default fp8
#                                fp8grouped gemv moe ffn nvfp4 w4a8 layer pointwise attn bwd;
#                                each <= 60 s, about 5 min in all on an H200)
#   fp8wide                      the 128 x 256 tile and the large rule's threshold (docs/fp8.md,
#                                ledger rows 15-17; about 7 min on an H200): FP8W_TILES (default
#                                256tmh 256otmh) verified at their edges, timed twice each beside
#                                128ptme at four M = 4096 shapes; both at 4096x7168x16384 under
#                                KILN_TMA_PROMOTION=128 and none; M = 1024, 2048, 3072 with
#                                DeepSeek-V3's N x K under 128pte, 128ptme, 256tmh and `large`; DeepSeek-V3's
#                                set under `measured` and `large`; table by scripts/fp8-table.py
#   fp8parts                     a 128 x 256 block-scaled tile against the drained halves (docs/fp8.md,
#                                ledger rows 18 and 26; about 2 min on an H200): FP8P_TILES (default
#                                256tmd, the epilogue deferred; 256ptmh, 256prtmh and 176ptmh lost
#                                and are not compiled) verified at their edges,
#                                then timed twice each beside
#                                256tmh and 128ptme at five of DeepSeek-V3's M = 4096 shapes, and
#                                DeepSeek-V3's set under `large`; table by scripts/fp8-table.py
#   fp8defer                     tensor scales, the deferred epilogue (docs/fp8.md, ledger row 26;
#                                about 2 min on an H200): 256md verified at its edges promoted and
#                                with fast accumulation (and 256md/k, stream-K by name), then timed
#                                twice beside 256mh at 6144^3 and 8192^3 both ways, and under
#                                `large`; table by scripts/fp8-table.py
#   fp8sk                        stream-K (docs/fp8.md, ledger row 19; about 3 min on an H200):
#                                128pte/k, 128ptme/k and 64x128ps/k verified at their edges, the
#                                small-M shapes under `measured` (the old choice), `large` (the
#                                rule with stream-K), 128pte/k and 128pte, twice each; 4096x2112x7168
#                                and 1024x7168x2048 with and without /k, twice; DeepSeek-V3's set
#                                under `measured` and `large`; table by scripts/fp8-table.py
#   fp8slices                    the large rule's slices at M <= 128 and the cluster sum (docs/
#                                fp8.md, ledger rows 20-21; about 4 min on an H200): 64x7168x2048
#                                unsplit and /4c, /7c, 128pte/2c verified at their edges, the slice
#                                curves of 64x128ps (1-7 slices, a and c) at five small-M shapes,
#                                twice; DeepSeek-V3's set under `measured` and `large`
#   fp8rows                      the 128-row tiles at M = 128 with few K blocks (docs/fp8.md,
#                                ledger rows 24-25; about 2 min on an H200): 256th and the last
#                                tile staged in the ring (256thl, 128ptel/1), verified at their
#                                edges, then timed twice each beside the rule's
#                                configs at 128x32768x512, 128x24576x1536 and 64x32768x512;
#                                DeepSeek-V3's set under `large`; table by scripts/fp8-table.py
#   fp8chain                     the dense FP8 GEMM in a stream (docs/fp8.md, ledger row 29;
#                                about 1 min): KILN_FP8_PDL=1 and 2 verified at the small-M
#                                edges, then chains of FP8CHAIN_N (8) launches in a CUDA graph at
#                                DeepSeek-V3's M = 64 and 128 shapes: kiln plainly, 1 and 2,
#                                beside cuBLASLt's chain, per launch; table by fp8-table.py
#   fp4moe                       the MoE kernels with 4-bit weights: `kiln moe prepack` (round
#                                trip), the NVFP4 and MXFP4 verify suites, then `kiln moe bench
#                                --weights` against kiln's bf16 kernel at the issue's decode (E 256,
#                                512 rows on 199 experts) and prefill (32,768 rows) shapes, K 7168,
#                                N 2048; table of the targets
#   fp4ab [verify|time]          the 4-bit experts' new paths (docs/moe.md ledger F2-F5): each
#                                verified first (KILN_FP4_PATH=dq and KILN_FP4_CTAS=2 over the
#                                4-bit suites, the W4A8 suite, the issue's 64-row verify timed),
#                                then A/B in alternating rounds: rs/dq at E64 8,192 rows (K 2048,
#                                N 1408) and E256 32,768 rows, 1/2 CTAs an SM at the E256 decode
#                                counts (512 and 64 rows), W4A8 at E256 32,768 and E64 8,192
#                                rows and at decode; table by scripts/fp4ab-table.py
#   fp4b [verify|time]           issue 46's decode and GEMV A/B (docs/moe.md ledger F6, docs/fp4.md
#                                G1): verify first (KILN_FP4_TAIL=8 over both 4-bit suites and
#                                the E256 512- and 64-row decode counts; `kiln fp4 verify --suite
#                                quick` under KILN_FP4_GEMV=async), then two alternating rounds of
#                                KILN_FP4_TAIL 1/8 at both decode counts and the GEMV regs/async
#                                at M 1 and 4, N,K >= 4096; tables by scripts/fp4ab-table.py and a
#                                grep of the GEMV rows (about 3 + 5 minutes on an H200)
#   fp4gemv [verify|time]        the NVFP4 GEMV's wide ring (docs/fp4.md G2): `kiln fp4 verify
#                                --suite quick` under KILN_FP4_GEMV=wide, then two alternating
#                                rounds of regs/wide at 1x8192x8192, 4x14336x4096, 16x8192x8192
#                                and 1x4096x4096 (each against cuBLAS bf16); the GEMV rows last
#                                (about 1 + 3 minutes on an H200)
#   fp4lean [verify|time]        the lean GEMV ring and the experts' shift decode (docs/fp4.md G3,
#                                docs/moe.md F7): `KILN_FP4_GEMV=lean fp4 verify --suite quick`,
#                                `KILN_FP4_DECODE=shift` over both 4-bit suites and the 512-row
#                                decode counts, then wide/lean at 1x8192x8192, 4x14336x4096,
#                                1x4096x4096, 2x8192x8192 and rot/shift at both decode counts, two
#                                alternating rounds each (about 6 minutes on an H200)
#   fp4xring [verify|time]       the NVFP4 GEMV's X ring (docs/fp4.md G5) and the 4-bit experts'
#                                last-wave split and paired down projection at the MoE layer's
#                                1-8 tokens (docs/moe.md F9, F10): `KILN_FP4_GEMV=xring fp4
#                                verify --suite full`, both 4-bit MoE suites under
#                                KILN_FP4_PAIR=all, the experts under KILN_FP4_TAIL=8 (and
#                                PAIR=all) at 1, 4 and 8 tokens (E64 top-8, H2048, I1408), then
#                                two alternating rounds of wide/xring at 1x8192x8192,
#                                4x14336x4096, 16x8192x8192, 8x8192x8192, 1x4096x4096, of the
#                                SwiGLU under tail 1/8 and of the down projection under tail 1/8
#                                x pair swiglu/all (about 1.5 + 4 minutes on an H200)
#   fp4swz [verify|time]         the NVFP4 GEMV's swizzled X ring and lean ring with X first
#                                (docs/fp4.md G6, G7) and W4A8's epilogue (docs/moe.md F12):
#                                `fp4 verify --suite full` under KILN_FP4_GEMV=xswz and leanx, the
#                                W4A8 suite, a ragged problem (K 1088) and the 512-row decode
#                                counts, compute-sanitizer on KILN_W4A8_SX=tma (F11: it faults);
#                                then two alternating rounds of xring/xswz at 1x8192x8192,
#                                4x14336x4096, 2x8192x8192, 1x4096x4096, of lean/leanx at
#                                1x8192x8192 and 1x4096x4096, and W4A8 at E256 32,768 rows and the
#                                512-row decode (about 2 + 4 minutes on an H200)
#   fp4stage [verify|time]       the NVFP4 GEMV's xstage ring (docs/fp4.md G8), W4A8's X scales
#                                by TMA once fixed (docs/moe.md F13) and its decode on the
#                                producer's warps (F14): `fp4 verify --suite quick` and `full`
#                                under KILN_FP4_GEMV=xstage, compute-sanitizer memcheck on it, on
#                                KILN_W4A8_SX=tma and on KILN_W4A8_DECODE=producer, the W4A8
#                                suite, a ragged problem (K 1088) and the 512-row decode under
#                                each W4A8 variant; then two alternating rounds of lean/xstage at
#                                1x8192x8192, 1x4096x4096, of xswz/xstage at 4x14336x4096,
#                                2x8192x8192, 8x8192x8192, and of the four W4A8 variants at E256
#                                32,768 rows and the 512-row decode (about 3 + 4 minutes on an
#                                H200)
#   fp4g9 [verify|time]          the NVFP4 GEMV's lean1 (docs/fp4.md G9) and W4A8 with tma the
#                                default and its descriptors built once a stage (docs/moe.md F15):
#                                `fp4 verify --suite quick` and `full` under KILN_FP4_GEMV=lean1,
#                                compute-sanitizer memcheck on it and on W4A8's default, the W4A8
#                                suite, a ragged problem (K 1088) and the 512-row decode under tma
#                                and ldg; then two alternating rounds of lean/lean1 at 1x8192x8192,
#                                1x4096x4096, and of W4A8 tma/ldg at E256 32,768 rows and the
#                                512-row decode (about 1.5 + 2.5 minutes on an H200)
#   w4a8beside [verify|time]     W4A8's promotion beside the next decode and its short tiles
#                                decode on the idle consumer (docs/moe.md F16, F17): compute-
#                                sanitizer memcheck under both, the W4A8 suite, a ragged problem
#                                (K 1088) and the 512-row decode under `beside` and under `beside`
#                                with `decode`; then two alternating rounds of after / beside /
#                                beside+decode at E256 32,768 rows and at the 512-row decode,
#                                kiln's bf16 SwiGLU beside each (about 0.5 + 1 minute on an H200:
#                                the mid-way call ran its first round's steps in 20 s)
#   w4a8ncu                      ncu on W4A8 at E256 32,768 rows (docs/moe.md, "What bounds W4A8"),
#                                the default against beside+decode (F16, F17; W4A8_NCU=after for
#                                the default alone, about a minute), one launch each
#                                after warm-up: speed of light, compute (pipes), memory workload
#                                with its shared-memory table (is shared memory the bound?), warp
#                                stalls, scheduler issue; NCU names the binary; about 2-3 minutes
#   fp4ncu                       ncu on the 4-bit streams (docs/moe.md, "Where decode stops"): the
#                                NVFP4 GEMV 1x8192x8192 (NCU_GEMV, default regs wide lean) and the E256 512-row decode
#                                SwiGLU, one launch each after warm-up: speed of light, warp
#                                stall reasons, scheduler issue, memory workload, occupancy;
#                                NCU names the binary (default ncu); about 2-4 minutes
#   fp4pack [verify|time]        the NVFP4 GEMV on codes in the GEMV layout (docs/fp4.md G10):
#                                `fp4 verify --suite quick` and `full` under KILN_FP4_GEMV=pack,
#                                compute-sanitizer memcheck on it; then two alternating rounds of
#                                auto/pack at 1x8192x8192, 4x8192x8192, 1x14336x4096 and
#                                4x14336x4096 (about 1 + 1 minutes on an H200)
#   anyopncu                     ncu on an odd-pitch C's write (ledger #100: why it goes at
#                                1.1-1.3 TB/s): 9664x16127x17 RC f16 in the small-K kernel (element
#                                and 16-byte-chunk stores), in the wgmma kernel's row store
#                                (KILN_WGMMA_SMALLK=0) and in cuBLAS, one launch each after warm-up:
#                                DRAM bytes read and written, L2 write sectors and requests, speed of
#                                light, warp stalls; NCU names the binary; about 2-3 minutes
#   moelayer [SEED]              the whole MoE layer (routing, gathered SwiGLU, down projection
#                                with its combine): `kiln moe check` (compiles), `kiln moe verify
#                                --layer` (LAYER_SUITE=quick|full, default full), `kiln fuzz
#                                --moe-layer` (FUZZ_LAYER, default 100), `kiln moe bench --layer`
#                                at the issue's shapes (both combines; both gathers), the
#                                moe_layer example if built (KILN_EXAMPLE_DIR), then with
#                                the wheel (as `python`) python/tests/gpu_check.py --moe:
#                                kiln.moe.experts and layer against torch, CUDA graphs, and the
#                                issue's targets against transformers' grouped_mm experts; a
#                                summary of the targets last
#   sanitize                     compute-sanitizer: `kiln sanitize` (every version, built-in
#                                problems) and `kiln sanitize --configs` (every wgmma_tma_ws tile
#                                config), JOBS at a time (default 8)
#   anyop [verify|time]          issue 48's paths (C off 16 bytes stored by rows; operands TMA
#                                cannot address read in place where wgmma_tma_ws/inplace.rs says
#                                so; swap-AB, KILN_WGMMA_SWAP; few 64x64 tiles at a long K split,
#                                KILN_WGMMA_LONGK; the small-K kernel, KILN_WGMMA_SMALLK): verify:
#                                the wgmma_tma_ws quick suite by the dispatch, with
#                                KILN_WGMMA_INPLACE=1 (every such operand in place), with
#                                KILN_WGMMA_SWAP=1 (every problem swapped), in the forced 128x144
#                                tile and with KILN_WGMMA_SMALLK=1 (every problem in the small-K
#                                kernel), the issue's seven shapes, `kiln fuzz` of ANYOP_FUZZ
#                                (1,500) GEMM problems by the dispatch, with INPLACE=1, SWAP=1 and
#                                SMALLK=1; time: the seven shapes against cuBLAS, the dispatch
#                                before these rules (ANYOP_OLD: INPLACE=0 SWAP=0 LONGK=0 SMALLK=0)
#                                and after, then `kiln bench --set random --count 300` at seeds 1
#                                and 2 the same two ways (one binary); each bench's summary last
#   ws-check                     after a change to the wgmma_tma_ws kernels or their headers: its
#                                full suite, the MoE quick suite, `kiln sanitize --configs`
#   peak                         `kiln peak`: copy bandwidth, read ceiling, cuBLAS's best bf16 GEMM
#   check                        `kiln --json check`: every variant compiled, CUBIN hashes in
#                                check.json and hashes.tsv
#   ab OLD_BIN NEW_BIN           paired A/B of two binaries: CUBIN hashes compared, both verified
#                                (AB_SUITE=full|quick, default full), then the targets set of both
#                                in one run, rotated old new new old (AB_ROUNDS, default 4),
#                                LAYOUTS as above; table by scripts/ab-table.py
#   landscape SHAPE...           exhaustive `kiln tune` of wgmma_tma_ws at each MxNxK, landscapes
#                                written for `kiln tune-replay` (tests/fixtures/landscapes/)
#   python                       the Python package: its wheel (target/wheels, or KILN_WHEEL)
#                                installed beside torch, the CPU tests, then
#                                python/tests/gpu_check.py (PYTHON_QUICK=1: --quick;
#                                PYTHON_ONLY=moe_fp4: those sections only)
#   suite                        `kiln suite --verify full` (the main job), JSON saved
#   varlen                       packed (variable-length) attention and the sliding window: the
#                                packed boundary suite, seeded and windowed batches, dense windows
#                                against the float64 reference, then the issue's packed batch (32
#                                sequences, lengths 128-8192, seed 1) timed beside one dense call
#                                of the same work (target: within 10 %), causal or not, d64/128/256
#   varlen-ab OLD_BIN NEW_BIN    packed attention, two binaries: the new one's packed suite, then
#                                the issue's packed batch (as `varlen`) with each binary in turn,
#                                old new new old (VARLEN_DIMS, default 128 64 256; causal or not);
#                                table of packed vs dense per binary (the bench's own dense runs)
#   fuzz [SEED]                  `kiln fuzz` (FUZZ_GEMM, FUZZ_ATTN, FUZZ_MOE problems; default
#                                10,000 / 2,000 / 1,000): fuzz.json, failures.jsonl
#   fp4                          `kiln fp4 verify` (FP4_SUITE=quick|full, default full), the NVFP4
#                                GEMV against cuBLAS bf16 at M 1 and 16 (N = K = 8192) and at
#                                1x2048x8192, then `kiln fp4 seeds` (the NVFP4 contest shapes with
#                                the contest's data, verified and timed); the step table last
#   decode                       decode over a paged KV cache: its variants compiled, the verify
#                                suite and the issue's problem against the float64 reference,
#                                then `kiln attn bench --decode` (GB/s of the cache, fraction of
#                                the copy ceiling) beside torch SDPA (enable_gqa) on the same
#                                cache unpaged (scripts/peers.py decode); table in summary.txt
#   inplace [kiln] [python]      attention on tensors where they lie (issue 43; default both):
#                                kiln: `kiln attn verify --strided` (every version on mixed
#                                orders), `kiln attn verify --decode` (the suite, dense caches and
#                                the GPU's bad-table flags included), then dense against paged
#                                decode timed at B64 H32/8 d128 ctx 8192 and B1 ctx 32768;
#                                python: with the wheel (as `python`), python/tests/inplace_check.py
#                                (mixed orders, dense-cache decode, CUDA-graph capture, bad tables,
#                                a transformers model decoding through the plug-in); table last
#   attn-host                    the attention host path (issue 43; one call, ~5 min, each step
#                                bounded to fit 600 s): `kiln attn verify --varlen-suite` (every
#                                packed problem with the grid from its longest sequences and from
#                                looser bounds, as without host copies; bad offsets found on the
#                                GPU), `kiln attn verify --decode` (left padding included), then
#                                with the wheel (as `python`) python/tests/host_path_check.py
#                                (packed attention with no sync, captured, bad offsets; decode with
#                                cache_leftpad; transformers' static cache through the plug-in
#                                against sdpa, kiln's decode counted, a step captured) and
#                                `python -m kiln.bench_calls` for the three attention ops; the
#                                call_cost example when built (KILN_EXAMPLE_BIN: its directory
#                                or binary); table last
#   moe-host                     the MoE ops' host cost and the layer's gathered gate/up (each
#                                step under 2 minutes): `kiln moe verify --layer --suite quick`
#                                with each gather (tma, cp_async), `kiln moe bench --layer` at
#                                E128 top-8 H2048 I768 T1+64+4096 with each gather, then with the
#                                wheel `python -m kiln.bench_calls` for gemm and the four MoE ops,
#                                and the call_cost example when built (KILN_EXAMPLE_BIN); table last
#   multi                        several GPUs (docs/multi-gpu.md): `kiln tune` of one space
#                                (MULTI_TUNE) on GPU 0 (cold JIT cache), on all GPUs, on GPU 0
#                                again, and --gpus naming a missing GPU; the two_gpus example
#                                (KILN_EXAMPLE_BIN, TWO_GPUS_ITERS); python/tests/distributed_check.py
#                                under torchrun on 1, 2 and all GPUs with the wheel (as `python`);
#                                NVLink multicast off; table by scripts/multi-table.py
#   norms                        RMSNorm and the rotary embedding (issue 43's prefill gap): `kiln
#                                pointwise verify` (float64, every variant), `kiln pointwise bench`
#                                (TB/s at the model shapes), then with the wheel (as `python`)
#                                gpu_check.py --only pointwise (against torch's eager ops, CUDA
#                                graphs, their times) and `python -m kiln.bench_model --models
#                                llama,qwen2 --layers 2 --prefill 1x4096,4x2048 --decode 1,64`
#   attn-pair OLD_BIN NEW_BIN    the attention checks of two binaries paired (issue 50): the forward's
#                                quick and strided suites, the backward's quick suite, the decode
#                                and packed suites, each --json (H200: 10, 3, 17, 9, 41 s), then
#                                scripts/verify-pair.py on each pair (same checks and verdicts)
#   lab-pair OLD_BIN NEW_BIN     the rest of the lab's families paired (issue 50; attn-pair has the
#                                attention checks): the GEMM's quick suite (--json, verify-pair),
#                                `kiln fuzz --seed 1 --dry-run` of each (the same lines), the same
#                                fuzz run on 50 GEMM and 20 attention problems (the same counts
#                                per version, none wrong), then each bench once per binary (the
#                                attention forward, backward, decode and packed, the GEMM; the same
#                                columns); about 5 minutes on an H200 (the GEMM suite's first run
#                                compiles cold: over 60 s)
#   candle                       kiln's ops in candle (kiln-candle, built here by scripts/candle.sh:
#                                its `block` example, CANDLE_EXAMPLE): the CUDA libraries it links
#                                found (ldd), the block's check (each op against float64, the
#                                block against candle's own ops, the experts in FP8 and 4 bits,
#                                the FP8 SwiGLU, the masked layout and W4A8),
#                                then the attention timing at B4 H16 S4096 d128 (kiln in candle and
#                                kiln's Rust API alternately, candle's composed
#                                matmul-softmax-matmul), not causal and causal; table last
#   bwd-tail                     the non-causal backward's last partial wave split (ledger B20;
#                                `bwd_fa3_tail`, `KILN_BWD_TAIL`): verified (d64 GQA S4096 split
#                                twice in one process, d128 f16 BHSD ragged, the quick suite with 3
#                                parts forced), then timed beside the default in one process
#                                (default, split, default, split; 1 s of warm-up each) at d64 B4 H16
#                                S4096, d64 B1 H16 S16384 and d128 B2 H16 S8192 (about 2 min)
#   bwd-compact                  the packed backward's grid without its empty blocks (ledger B23,
#                                `KILN_BWD_VARLEN_COMPACT`): the packed suite and a drawn GQA batch
#                                verified with it, then the issue's packed batch (32 sequences of
#                                128..8192, d64 and d128) against one dense call, the knob off, on,
#                                off, on (each its own process; the vs-dense ratio compares them)
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
abspath() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
OUT=$(abspath "${OUT:-./gpu-out}")
if [ -n "${KILN_BIN:-}" ]; then KILN=$(abspath "$KILN_BIN"); else KILN=$ROOT/target/release/kiln; fi
PY=${PYTHON:-python3}
export KILN_STORE=${KILN_STORE:-$OUT/kiln.db}
export KILN_CACHE_DIR=${KILN_CACHE_DIR:-${TMPDIR:-/tmp}/kiln-jit-cache}
cd "$ROOT"

task=${1:-help}
[ $# -gt 0 ] && shift
if [ "$task" = help ] || [ "$task" = -h ] || [ "$task" = --help ]; then
  sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
fi

D=$OUT/$task
mkdir -p "$D"
status=0
ROWS=()

# machine BIN...: the GPU, the host's cores, the date and each binary with its commit.
machine() {
  {
    nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv 2>&1
    echo "cores: $(nproc)"
    date -u
    for b in "$@"; do
      local c
      if [ -f "$(dirname "$b")/COMMIT" ]; then c=$(cat "$(dirname "$b")/COMMIT")
      else c="$(git rev-parse --short HEAD 2>/dev/null || echo unknown) (this checkout$(git diff --quiet 2>/dev/null || echo ', with changes'))"; fi
      echo "binary: $b, $("$b" --version 2>/dev/null), commit $c"
    done
  } > "$D/machine.txt"
}

# step NAME SECONDS CMD...: CMD's output (stdout and stderr) in NAME.txt, a row for the table.
step() {
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS rc
  timeout "$limit" "$@" > "$D/$name.txt" 2>&1
  rc=$?
  [ $rc -ne 0 ] && status=1
  ROWS+=("$(printf '%-26s %4s %6s  %s' "$name" "$rc" "$((SECONDS - t0))" "$(grep -v '^\s*$' "$D/$name.txt" | tail -1 | cut -c1-100)")")
  return $rc
}

# step_json NAME SECONDS CMD...: CMD's stdout in NAME.json, its stderr in NAME.err.
step_json() {
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS rc
  timeout "$limit" "$@" > "$D/$name.json" 2> "$D/$name.err"
  rc=$?
  [ $rc -ne 0 ] && status=1
  ROWS+=("$(printf '%-26s %4s %6s  %s' "$name" "$rc" "$((SECONDS - t0))" "$(grep -v '^\s*$' "$D/$name.err" | tail -1 | cut -c1-100)")")
  return $rc
}

# fp4_task_setup [verify|time|all]: what the 4-bit A/B tasks (fp4swz, fp4stage, fp4g9,
# fp4pack) share: the binary checked, the decode counts, `part` (which half to run), RAGGED (a
# ragged problem with a partial last K block) and SAN (the sanitizer binary).
fp4_task_setup() {
  need_bin "$KILN"; machine "$KILN"
  decode_counts
  part=$1
  RAGGED=(--counts 129,140,63,1,200,0,65,128,257,33 --k 1088)
  SAN=${SANITIZER:-compute-sanitizer}
}

# w4a8_bench NAME [VAR=VALUE...]: W4A8 timed at E256 32,768 rows and at the 512-row decode under
# the given knobs, as w4a8-prefill-NAME.txt and w4a8-decode512-NAME.txt (fp4_task_setup first).
w4a8_bench() {
  local name=$1; shift
  step "w4a8-prefill-$name" 120 env "$@" "$KILN" --no-store \
    moe bench --weights mxfp4 --act e4m3 --experts 256 --tokens 32768 "${SW[@]}"
  step "w4a8-decode512-$name" 120 env "$@" "$KILN" --no-store \
    moe bench --weights mxfp4 --act e4m3 --counts "$DECODE" "${SW[@]}"
}

# w4a8_verify NAME [VAR=VALUE...]: the W4A8 suite, the ragged SwiGLU and GEMM problems and the
# 512-row decode counts under the given knobs, as verify-w4a8NAME*.json (fp4_task_setup first).
w4a8_verify() {
  local n=$1; shift
  local run=(env "$@" "$KILN" --no-store --json moe verify --weights mxfp4 --act e4m3)
  step_json verify-w4a8$n 90 "${run[@]}"
  step_json verify-w4a8$n-ragged-swiglu 60 "${run[@]}" "${RAGGED[@]}" --n 320 --swiglu --routed
  step_json verify-w4a8$n-ragged-gemm 60 "${run[@]}" "${RAGGED[@]}" --n 384
  step_json verify-w4a8$n-512rows 60 "${run[@]}" --counts "$DECODE" "${SW[@]}"
}

# decode_counts: DECODE and DECODE64 (issue 46's E256 decode counts: 512 rows on 199 experts, 64
# on 56) and SW (their K 7168, N 2048 routed SwiGLU), for the 4-bit A/B tasks.
decode_counts() {
  DECODE=$("$PY" -c 'import random; c=[3]*114+[2]*85+[0]*57; random.Random(35).shuffle(c); print(",".join(map(str,c)))')
  DECODE64=$("$PY" -c 'import random; c=[2]*8+[1]*48+[0]*200; random.Random(8).shuffle(c); print(",".join(map(str,c)))')
  SW=(--n 2048 --k 7168 --swiglu --routed)
}

# decode_ab KNOB NAME VALUE...: two alternating rounds of the NVFP4 SwiGLU at both decode counts
# under KNOB=VALUE for each value, as decode512-NAMEVALUE-ROUND.json and decode64-... (the A/B
# pairs of scripts/fp4ab-table.py).
decode_ab() {
  local knob=$1 name=$2 r v
  shift 2
  for r in 1 2; do
    for v in "$@"; do
      step_json "decode512-$name$v-$r" 120 env "$knob=$v" "$KILN" --no-store --json moe bench --weights nvfp4 --counts "$DECODE" "${SW[@]}"
      step_json "decode64-$name$v-$r" 120 env "$knob=$v" "$KILN" --no-store --json moe bench --weights nvfp4 --counts "$DECODE64" "${SW[@]}"
    done
  done
}

# gemv_ab PATH_A PATH_B SHAPE...: two alternating rounds of `fp4 bench --gemv` under
# KILN_FP4_GEMV=PATH for each path and "M N K" shape, as gemv-PATH-mM-nN-kK-ROUND.txt.
gemv_ab() {
  local a=$1 b=$2 r g shape m n k
  shift 2
  for r in 1 2; do
    for g in "$a" "$b"; do
      for shape in "$@"; do
        read -r m n k <<< "$shape"
        step "gemv-$g-m$m-n$n-k$k-$r" 120 env KILN_FP4_GEMV=$g "$KILN" --no-store fp4 bench --gemv --m "$m" --n "$n" --k "$k"
      done
    done
  done
}

# table_lines PATTERN FILE...: each existing file's lines matching PATTERN (rules left out), named
# by the file, appended to the summary.
table_lines() {
  local pat=$1 f; shift
  for f in "$@"; do
    [ -e "$f" ] || continue
    grep -hE "$pat" "$f" | grep -v -- '---' | sed "s|^|$(basename "$f") |"
  done | tee -a "$D/summary.txt"
}

# gemv_summary VERIFY_NAME...: each GEMV verify's failed rows and its totals, then every GEMV
# bench row of gemv_ab, appended to summary.txt.
gemv_summary() {
  local v
  for v in "$@"; do
    grep -E '(^\| (quantize|dequantize|refuse|gemv) .*(mismatches, first|could not run|over 1e|not written|CPU: ))|checks on' \
      "$D/$v.txt" 2>/dev/null | sed "s|^|$v |" | tee -a "$D/summary.txt"
  done
  for f in "$D"/gemv-*-[12].txt; do
    [ -e "$f" ] || continue
    grep -hE '^\| (nvfp4_gemv|cublas)' "$f" | sed "s|^|$(basename "$f" .txt) |"
  done | tee -a "$D/summary.txt"
}

table() {
  echo
  echo "== $task: $D =="
  printf '%-26s %4s %6s  %s\n' step exit secs "last line"
  local r
  for r in "${ROWS[@]}"; do echo "$r"; done
  echo "exit $status"
}

need_bin() {
  local b
  for b in "$@"; do
    [ -x "$b" ] || { echo "no kiln binary at $b: build it (cargo build --release) or set KILN_BIN" >&2; exit 2; }
  done
}

# use_wheel: the wheel built here (scripts/python.sh, or KILN_WHEEL) installed into a scratch
# folder beside torch, on PYTHONPATH.
use_wheel() {
  local wheel site
  wheel=${KILN_WHEEL:-$(ls "$ROOT"/target/wheels/kiln-*.whl 2>/dev/null | head -n 1)}
  [ -n "$wheel" ] || { echo "no wheel: build one with bash scripts/python.sh (or set KILN_WHEEL)" >&2; exit 2; }
  site=${TMPDIR:-/tmp}/kiln-python-site
  rm -rf "$site"
  "$PY" -m pip install --quiet --no-deps --no-index --target "$site" "$wheel" || exit 1
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
}

# call_cost_step: the call_cost example (KILN_EXAMPLE_BIN: its directory or binary) when built,
# else a note in call-cost.txt.
call_cost_step() {
  local ex=${KILN_EXAMPLE_BIN:-$ROOT/target/release/examples}
  [ -d "$ex" ] && ex=$ex/call_cost
  if [ -x "$ex" ]; then
    step call-cost 40 "$ex" --calls 1000
  else
    echo "no example binary at $ex: cargo build --release --examples (or set KILN_EXAMPLE_BIN)" > "$D/call-cost.txt"
  fi
}

# The issue's attention shapes: head dims 128, 64, 256, causal or not, B4 S4096 / B2 S8192 /
# B1 S16384, 16 heads.
attn_shapes() {
  local d c bs
  for d in 128 64 256; do for c in "" causal; do for bs in "4 4096" "2 8192" "1 16384"; do
    echo "$d ${c:--} $bs"
  done; done; done
}

# bwd_staged_verify NAME VERSION [nokeys]: a backward version that stages dQ in shared memory
# verified (steps NAME-*, each <= 90 s): compiled, the quick suite with d128's dQ split by columns
# and (unless nokeys) by keys (KILN_BWD_DQ_KEYS=1), GQA causal S 1000 d128 (both splits), ragged
# BHSD f16 d64, and a deterministic causal run.
bwd_staged_verify() {
  local n=$1 V=$2 keys=${3:-keys}
  step "$n-compile" 90 "$KILN" check --version "$V"
  step "$n-quick" 90 "$KILN" attn verify --backward --suite quick --version "$V"
  [ "$keys" = nokeys ] ||
    step "$n-quick-keys" 90 env KILN_BWD_DQ_KEYS=1 "$KILN" attn verify --backward --suite quick --version "$V" --dim 128
  step "$n-gqa-causal" 90 "$KILN" attn verify --backward --version "$V" --batch 2 --heads 4 --kv-heads 2 \
    --seqlen 1000 --dim 128 --causal
  [ "$keys" = nokeys ] ||
    step "$n-gqa-causal-keys" 90 env KILN_BWD_DQ_KEYS=1 "$KILN" attn verify --backward --version "$V" --batch 2 \
      --heads 4 --kv-heads 2 --seqlen 1000 --dim 128 --causal
  step "$n-ragged-bhsd" 90 "$KILN" attn verify --backward --version "$V" --batch 1 --heads 3 --kv-heads 1 \
    --seqlen-q 700 --seqlen-kv 1300 --dim 64 --causal --layout BHSD --dtype f16
  step "$n-determ" 90 "$KILN" attn verify --backward --version "$V" --batch 1 --heads 2 --seqlen 1000 \
    --dim 128 --causal --deterministic
}

# bwd_dim_verify NAME VERSION D: a backward version of one head dim D verified (steps NAME-*,
# each <= 90 s): compiled, the quick suite's problems at D, GQA causal S 1000, ragged BHSD f16
# (700 queries, 1300 keys) and a deterministic causal run.
bwd_dim_verify() {
  local n=$1 V=$2 d=$3
  step "$n-compile" 90 "$KILN" check --version "$V"
  step "$n-quick" 90 "$KILN" attn verify --backward --suite quick --version "$V" --dim "$d"
  step "$n-gqa-causal" 90 "$KILN" attn verify --backward --version "$V" --batch 2 --heads 4 --kv-heads 2 \
    --seqlen 1000 --dim "$d" --causal
  step "$n-ragged-bhsd" 90 "$KILN" attn verify --backward --version "$V" --batch 1 --heads 3 --kv-heads 1 \
    --seqlen-q 700 --seqlen-kv 1300 --dim "$d" --causal --layout BHSD --dtype f16
  step "$n-determ" 90 "$KILN" attn verify --backward --version "$V" --batch 1 --heads 2 --seqlen 1000 \
    --dim "$d" --causal --deterministic
}

# bwd_bench: every backward version (BWD_VERSION: only those, space-separated; NAME@D for one at
# head dim D only) at the issue's
# 13 backward shapes (BWD_KEYS=1: the d128 ones again with bwd_fa3_bulk_dq's dQ split by keys,
# KILN_BWD_DQ_KEYS=1, as version "bwd_fa3_bulk_dq keys"; BWD_KEYS=<version>: that version's),
# then SDPA's cuDNN and FLASH backwards
# on them (scripts/peers.py backward), the step table, and summary.txt (TFLOPS and the ratios
# per shape and version).
bwd_bench() {
  : > "$D/bwd-bench.jsonl"
  t0=$SECONDS; failed=0; shapes=""
  while read -r d c b h s det; do
    flags=(); [ "$c" = causal ] && flags+=(--causal); [ "$det" = det ] && flags+=(--deterministic)
    shape=(--batch "$b" --heads "$h" --seqlen "$s" --dim "$d")
    meta="\"batch\": $b, \"heads\": $h, \"seqlen\": $s, \"dim\": $d, \"causal\": $([ "$c" = causal ] && echo true || echo false), \"deterministic\": $([ "$det" = det ] && echo true || echo false)"
    # (d256: every version that runs it; the WGMMA ones refuse it)
    # (NAME@D: that version at head dim D only, e.g. bwd_fa3_m128@64, which refuses the others)
    [ "$d" != 256 ] && for v in ${BWD_VERSION:-}; do
      [ "${v#*@}" = "$v" ] || [ "${v#*@}" = "$d" ] || continue
      flags+=(--version "${v%@*}")
    done
    rows=$(timeout 120 "$KILN" --json attn bench --backward "${shape[@]}" "${flags[@]}" --reps 10 --warmup 3 \
      2>>"$D/bwd-bench.err" | tr -d '\n') || failed=1
    echo "{$meta, \"rows\": ${rows:-null}}" >> "$D/bwd-bench.jsonl"
    if [ -n "${BWD_KEYS:-}" ] && [ "$d" = 128 ]; then
      kv=$([ "$BWD_KEYS" = 1 ] && echo bwd_fa3_bulk_dq || echo "$BWD_KEYS")
      flags=(); [ "$c" = causal ] && flags+=(--causal); [ "$det" = det ] && flags+=(--deterministic)
      rows=$(KILN_BWD_DQ_KEYS=1 timeout 120 "$KILN" --json attn bench --backward "${shape[@]}" "${flags[@]}" \
        --version "$kv" --reps 10 --warmup 3 2>>"$D/bwd-bench.err" | tr -d '\n' \
        | sed "s/\"$kv\"/\"$kv keys\"/g") || failed=1
      echo "{$meta, \"rows\": ${rows:-null}}" >> "$D/bwd-bench.jsonl"
    fi
    [ "$det" = det ] || shapes="$shapes;$b,$h,$s,$d$([ "$c" = causal ] && echo ,causal)"
  done <<'SHAPES'
128 - 2 16 8192 -
128 causal 2 16 8192 -
128 - 2 16 8192 det
128 causal 2 16 8192 det
64 - 4 16 4096 -
64 causal 4 16 4096 -
64 - 1 16 16384 -
64 causal 1 16 16384 -
256 - 4 16 4096 -
256 causal 4 16 4096 -
256 - 1 16 16384 -
256 causal 1 16 16384 -
128 causal 4 32 4096 -
SHAPES
  [ $failed -ne 0 ] && status=1
  ROWS+=("$(printf '%-26s %4s %6s  %s' bwd-bench $failed "$((SECONDS - t0))" "13 shapes, bwd-bench.jsonl")")
  step peers-backward 400 "$PY" scripts/peers.py backward --reps 10 --shapes "${shapes#;}"
  table
  echo
  "$PY" - "$D" <<'EOF' | tee "$D/summary.txt"
import json, os, sys
d = sys.argv[1]
sys.path.insert(0, "scripts")
from jsonl import rows as jsonl_rows
jl = lambda p: jsonl_rows(os.path.join(d, p))
peer = {(r.get("batch"), r.get("heads"), r.get("seqlen"), r.get("dim"), bool(r.get("causal"))): r for r in jl("peers-backward.txt")}
print("backward TFLOPS (2.5x the forward's FLOPs, as FlashAttention counts); peers: SDPA's backward")
print(f"{'shape':32} {'version':18} {'kiln TF':>8} {'cuDNN TF':>9} {'FA2 TF':>8} {'x cuDNN':>8} {'x FA2':>7}")
fmt = lambda x, w: f"{x:{w}.1f}" if isinstance(x, (int, float)) else f"{'-':>{w}}"
for r in jl("bwd-bench.jsonl"):
    key = (r["batch"], r.get("heads", 16), r["seqlen"], r["dim"], r["causal"])
    p = peer.get(key, {})
    cud, fl = p.get("cudnn_tflops"), p.get("flash_tflops")
    shape = f"d{key[3]} B{key[0]} H{key[1]} S{key[2]}{' causal' if key[4] else ''}{' determ.' if r['deterministic'] else ''}"
    rows = r.get("rows") or [{}]
    for row in rows if isinstance(rows, list) else [rows]:
        tf = row.get("tflops")
        x = lambda peer_tf, w: f"{tf / peer_tf:{w}.3f}" if tf and peer_tf else f"{'-':>{w}}"
        print(f"{shape:32} {row.get('version', '-'):18} {fmt(tf, 8)} {fmt(cud, 9)} {fmt(fl, 8)} {x(cud, 8)} {x(fl, 7)}")
EOF
}

case $task in
verify)
  need_bin "$KILN"; machine "$KILN"
  ops=("$@"); [ ${#ops[@]} -eq 0 ] && ops=(gemm attn moe)
  for op in "${ops[@]}"; do
    case $op in
      gemm) step gemm-verify-full 580 "$KILN" verify --suite full ;;
      attn) step attn-verify-full 580 "$KILN" attn verify --suite full ;;
      moe) step moe-verify-full 580 "$KILN" moe verify --suite full ;;
      *) echo "unknown op \`$op\` for verify: use gemm, attn or moe" >&2; exit 2 ;;
    esac
  done
  table ;;

targets)
  need_bin "$KILN"; machine "$KILN"
  step_json targets 580 "$KILN" --json bench --set targets --layouts "${LAYOUTS:-RC,CR,RR,CC}" \
    --passes "${1:-3}" --order-seed "${ORDER_SEED:-22}"
  "$PY" scripts/targets-table.py "$D/targets.json" > "$D/targets-table.txt" 2>&1 || status=1
  table
  echo; grep -E '^(RC|CR|RR|CC|all|lowest|pass)' "$D/targets-table.txt" ;;

ladder)
  need_bin "$KILN"; machine "$KILN"
  step ladder 580 "$KILN" bench --set ladder --all
  table
  echo; grep -E '^\|' "$D/ladder.txt" | tail -40 ;;

attention)
  need_bin "$KILN"; machine "$KILN"
  # ROUNDS rounds (default 1), each timing kiln then the peer at every shape in each of LAYOUTS
  # (default BSHD; BSHD,BHSD for both): a ratio holds only if it holds in every round.
  : > "$D/attn-bench.jsonl"; : > "$D/peers-attention.txt"
  t0=$SECONDS; failed=0
  for round in $(seq 1 "${ROUNDS:-1}"); do
    for layout in $(echo "${LAYOUTS:-BSHD}" | tr ',' ' '); do
      shapes=""
      while read -r d c b s; do
        flag=; [ "$c" = causal ] && flag=--causal
        rows=$(timeout 60 "$KILN" --json attn bench --batch "$b" --heads 16 --seqlen "$s" --dim "$d" $flag \
          --layout "$layout" --version "${ATTN_VERSION:-fa3_wgmma}" --reps 10 --warmup 3 \
          2>>"$D/attn-bench.err" | tr -d '\n') || failed=1
        echo "{\"round\": $round, \"layout\": \"$layout\", \"batch\": $b, \"seqlen\": $s, \"dim\": $d, \"causal\": $([ -n "$flag" ] && echo true || echo false), \"rows\": ${rows:-null}}" >> "$D/attn-bench.jsonl"
        shapes="$shapes;$b,16,$s,$d$([ -n "$flag" ] && echo ,causal)"
      done < <(attn_shapes)
      lower=$(echo "$layout" | tr 'A-Z' 'a-z')
      timeout 300 "$PY" scripts/peers.py attention --reps 10 --layout "$lower" --shapes "${shapes#;}" \
        2>>"$D/peers-attention.err" | sed "s/^{/{\"round\": $round, /" >> "$D/peers-attention.txt" || failed=1
    done
  done
  [ $failed -ne 0 ] && status=1
  ROWS+=("$(printf '%-26s %4s %6s  %s' attn-bench $failed "$((SECONDS - t0))" "rounds ${ROUNDS:-1}, layouts ${LAYOUTS:-BSHD}: attn-bench.jsonl, peers-attention.txt")")
  table
  echo
  "$PY" - "$D" <<'EOF' | tee "$D/summary.txt"
import json, os, sys
from collections import defaultdict
d = sys.argv[1]
sys.path.insert(0, "scripts")
from jsonl import rows as jsonl_rows
jl = lambda p: jsonl_rows(os.path.join(d, p))
key = lambda r: (r.get("layout", "BSHD").upper(), r["dim"], r["batch"], r["seqlen"], bool(r["causal"]))
peer = {(r.get("round", 1),) + key(r): r for r in jl("peers-attention.txt")}
ratios, tfs = defaultdict(list), defaultdict(list)
for r in jl("attn-bench.jsonl"):
    rows = r.get("rows") or [{}]
    tf = (rows[0] if isinstance(rows, list) else rows).get("tflops")
    p = peer.get((r["round"],) + key(r), {})
    cud = p.get("cudnn_tflops")
    tfs[key(r)].append((tf, cud, p.get("flash_tflops")))
    if tf and cud:
        ratios[key(r)].append(tf / cud)
print(f"{'shape':28} {'kiln TF':>8} {'cuDNN TF':>9} {'FA2 TF':>8} {'x cuDNN per round':>24} {'min':>6}")
low = 0
for k, v in tfs.items():
    med = lambda i: sorted(x[i] for x in v if x[i])[len([x for x in v if x[i]]) // 2] if any(x[i] for x in v) else float("nan")
    rs = ratios.get(k, [])
    lo = min(rs) if rs else float("nan")
    low += 1 if not rs or lo < 1.0 else 0
    shape = f"{k[0]} d{k[1]} B{k[2]} S{k[3]}{' causal' if k[4] else ''}"
    print(f"{shape:28} {med(0):8.1f} {med(1):9.1f} {med(2):8.1f} {' '.join(f'{x:.3f}' for x in rs):>24} {lo:6.3f}")
print(f"{len(tfs)} shapes, {low} below 1.0x cuDNN in some round")
EOF
  ;;

fp8)
  need_bin "$KILN"; machine "$KILN"
  # The dense FP8 GEMM (issue 34): verify, then kiln (with cuBLASLt beside it) and torch's
  # _scaled_mm on DeepSeek-V3's set and the issue's large shapes, one run, one table.
  step fp8-verify 300 "$KILN" fp8 verify --vendor
  step_json fp8-ds 300 "$KILN" --json fp8 bench --set deepseek --scale block --reps 20
  step_json fp8-large-block 120 "$KILN" --json fp8 bench --shape 4096x7168x16384 --scale block --reps 20
  step_json fp8-tensor 120 "$KILN" --json fp8 bench --shape 8192x8192x8192 --scale tensor --reps 20
  step_json fp8-tensor-fast 120 "$KILN" --json fp8 bench --shape 8192x8192x8192 --scale tensor --unpromoted --reps 20
  step peers-fp8-ds 300 "$PY" scripts/peers.py fp8 --set deepseek --scales block --fast-accum off --reps 20
  step peers-fp8-large 200 "$PY" scripts/peers.py fp8 --shapes "4096x7168x16384;8192x8192x8192" --scales block,tensor --reps 20
  # The FP8 GEMM through kiln's own commands (--dtype e4m3|e5m2 --scale ...), its sanitizer runs
  # and the ladder's FP8 rung.
  step fp8-cli-verify 300 "$KILN" verify --dtype e4m3 --suite quick
  step fp8-cli-verify-e5m2 120 "$KILN" verify --dtype e5m2 --scale tensor --shape 129x257x4112
  step fp8-cli-bench 120 "$KILN" bench --dtype e4m3 --scale block --shape 4096x7168x16384
  step fp8-cli-plan 30 "$KILN" plan --dtype e4m3 --scale block --shape 64x2112x7168
  step fp8-cli-inspect 120 "$KILN" inspect gemm fp8_wgmma --dtype e4m3 --scale block
  step fp8-cli-tune 400 "$KILN" tune --dtype e4m3 --scale block --shape 64x2112x7168 --reps 10
  step fp8-cli-ladder 400 "$KILN" bench --set ladder
  step fp8-sanitize 900 "$KILN" sanitize --version fp8_wgmma --jobs "${JOBS:-4}"
  table
  echo
  "$PY" - "$D" <<'EOF' | tee "$D/summary.txt"
import json, math, os, sys
d = sys.argv[1]
def rows(name):
    try:
        data = json.load(open(os.path.join(d, name)))
    except (OSError, ValueError):
        return []
    return data if isinstance(data, list) else data.get("rows", data.get("timings", []))
peer = {}
sys.path.insert(0, "scripts")
from jsonl import rows as jsonl_rows
for f in ("peers-fp8-ds.txt", "peers-fp8-large.txt"):
    for r in jsonl_rows(os.path.join(d, f)) if os.path.exists(os.path.join(d, f)) else []:
        if "tflops" in r:
            peer[(r["m"], r["n"], r["k"], r["scale"], r["fast_accum"])] = r["tflops"]
print(f"{'problem':28} {'kiln TF':>8} {'cuBLASLt':>9} {'torch TF':>9} {'x torch':>8}")
ds = []
for f in ("fp8-ds.json", "fp8-large-block.json", "fp8-tensor.json", "fp8-tensor-fast.json"):
    for r in rows(f):
        if r.get("version") != "kiln" and r.get("config") is None:
            continue
        fast = not r.get("promote", True)
        lt = r["tflops"] * r["speedup_vs_cublaslt"] ** -1 if r.get("speedup_vs_cublaslt") else float("nan")
        t = peer.get((r["m"], r["n"], r["k"], r["scale"], fast))
        ratio = r["tflops"] / t if t else float("nan")
        if f == "fp8-ds.json" and t:
            ds.append(ratio)
        print(f"{r['m']}x{r['n']}x{r['k']} {r['scale']}{' fast' if fast else '':5} {r['tflops']:8.1f} {lt:9.1f} {t or float('nan'):9.1f} {ratio:8.3f}")
if ds:
    print(f"DeepSeek-V3 set: geomean {math.exp(sum(map(math.log, ds)) / len(ds)):.3f}x torch, min {min(ds):.3f}x ({len(ds)} shapes)")
EOF
  ;;

fp8ab)
  need_bin "$KILN"; machine "$KILN"
  # Issue 45: the small-M tiles, the scales through shared memory and the atomic split-K sum
  # (KILN_FP8_RULE=bytes picks among them) against the rule of a8381a5, verified first.
  seed=9314887608041299076  # the fuzz failure's inputs (tests/fixtures/repro)
  part=${1:-all}  # verify, time or all
  if [ "$part" != time ]; then
  step fp8ab-check 180 "$KILN" fp8 check
  step fp8ab-verify 300 "$KILN" fp8 verify --suite quick
  # The fuzz failure fails its bound again (exit 7, by design: docs/fp8.md says why); what these
  # steps show is the error under every config and without the f16 rounding, so they leave the
  # task's status alone.
  s0=$status
  step fp8ab-repro 60 "$KILN" verify --repro tests/fixtures/repro/fp8-2x2x624-f16.jsonl
  step fp8ab-repro-f16 60 "$KILN" fp8 verify --shape 2x2x624 --out f16 --seed $seed --tile all
  step fp8ab-repro-f32 60 "$KILN" fp8 verify --shape 2x2x624 --out f32 --seed $seed --tile all
  status=$s0
  fi
  if [ "$part" != verify ]; then
  step fp8ab-peak 60 "$KILN" peak
  # the new rule (FP8AB_RULE, default fill: the TMA-store tiles 112-176 wide above M = 128)
  # beside the old twice, then FP8AB_TILES
  tiles=(); for t in ${FP8AB_TILES:-128te 128pte 128ptme 128ote 112se 160se 176se 64x128ps}; do tiles+=(--tile "$t"); done
  step_json fp8ab-ds 400 "$KILN" --json fp8 bench --set deepseek --scale block --reps 20 \
    --tile waves --tile waves --tile "${FP8AB_RULE:-fill}" "${tiles[@]}"
  step_json fp8ab-large 150 "$KILN" --json fp8 bench --shape 4096x7168x16384 --scale block --reps 10 \
    --tile 128p --tile 128p --tile 128te --tile 128pte --tile 128ptme --tile 128ptmh --tile 128ote --tile 112se --tile 160se --tile 176se
  fi
  table
  echo
  "$PY" - "$D" <<'EOF' | tee "$D/summary.txt"
import json, math, os, re, sys
d = sys.argv[1]
copy = None
try:
    m = re.search(r"copy ([0-9.]+) TB/s", open(os.path.join(d, "fp8ab-peak.txt")).read())
    copy = float(m.group(1)) if m else None
except OSError:
    pass
def rows(name):
    try:
        return json.load(open(os.path.join(d, name))).get("timings", [])
    except (OSError, ValueError, AttributeError):
        return []
def table(name, old_n):
    by = {}
    for r in rows(name):
        by.setdefault((r["m"], r["n"], r["k"]), []).append(r)
    gain, vs, small = [], [], []
    us = lambda r: r["median_ms"] * 1e3
    for (m, n, k), rs in by.items():
        kiln = [r for r in rs if r["version"] != "cublaslt"]
        lt = [r for r in rs if r["version"] == "cublaslt"]
        old, new = kiln[:old_n], kiln[old_n:]
        if not old or not new:
            continue
        o = min(us(r) for r in old)
        spread = (max(us(r) for r in old) - o) / o
        b = min(new, key=us)
        lt_us = us(lt[0]) if lt else float("nan")
        kb = (k + 127) // 128
        moved = m * k + n * k + 4 * (m * kb + ((n + 127) // 128) * kb) + 2 * m * n
        share = moved / (us(new[0]) * 1e-6) / 1e12 / copy if copy and m <= 128 else float("nan")
        gain.append(o / us(new[0]))
        vs.append(lt_us / us(new[0]))
        if m <= 128:
            small.append((share, lt_us / us(new[0])))
        cells = " ".join(f"{r['config']}={us(r):.1f}" for r in new)
        of_copy = f"  {share:6.1%} of copy" if m <= 128 else ""
        print(f"{m}x{n}x{k:<6} old {o:8.1f} (spread {spread:5.1%})  new {us(new[0]):8.1f} x{o / us(new[0]):5.2f}"
              f"  best {b['config']} {us(b):.1f}  cuBLASLt {lt_us:8.1f} ({lt_us / us(new[0]):4.2f}x)"
              f"{of_copy} | {cells}")
    g = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")
    if gain:
        print(f"geomean: new rule {g(gain):.3f}x the old, {g(vs):.3f}x cuBLASLt, min {min(vs):.3f}x")
    if small:
        print(f"M <= 128: {min(s for s, _ in small):.1%} to {max(s for s, _ in small):.1%} of copy,"
              f" geomean {g([v for _, v in small]):.3f}x cuBLASLt")
def agreement(name):
    # kiln and cuBLASLt do the same promoted arithmetic: unsplit configs matched it bit for bit
    # at e008ce4 (H100), split ones within 2e-5; a config far off is wrong at that shape
    worst = {}
    for r in rows(name):
        d = r.get("rel_diff_vs_cublaslt")
        if r["version"] != "cublaslt" and d is not None:
            c = r["config"].split("/")[0]
            if d > worst.get(c, (-1.0, ""))[0]:
                worst[c] = (d, f"{r['m']}x{r['n']}x{r['k']}")
    bad = [c for c, (d, _) in worst.items() if not d <= 1e-4]
    print("largest difference from cuBLASLt per config: " + ", ".join(
        f"{c} {d:.1e} ({s})" for c, (d, s) in sorted(worst.items())))
    print(f"configs over 1e-4: {', '.join(bad) if bad else 'none'}")
print(f"copy bandwidth: {copy} TB/s")
print(f"== DeepSeek-V3 (us; old = the rule of a8381a5, timed twice; new = rule {os.environ.get('FP8AB_RULE', 'fill')}) ==")
table("fp8ab-ds.json", 2)
agreement("fp8ab-ds.json")
print("== 4096x7168x16384 (old = 128p twice; the rest in --tile order) ==")
table("fp8ab-large.json", 2)
agreement("fp8ab-large.json")
EOF
  ;;

fp8ml)
  need_bin "$KILN"; machine "$KILN"
  # The large-M mainloop: row 12 set 128te against the pipelined promotion (128pte) and the
  # consumers taking turns (128ote, 176ose); rows 13-14 (the default) 128te and 128pte against the
  # pairs along M multicasting B (128ptme, the large rule's since row 13) and those with a sixth
  # stage for one staging buffer a consumer (128ptmh), verified first. Edges:
  # 2048x2048x4096 gives a CTA two tiles (turns and clusters run on across units), M = 40 leaves
  # the second consumer past M (and a pair's second tile), 300x520 has odd rows and columns of
  # tiles (a cluster's tiles past M and N), 200x360 f32 out, M = 129 has no A-scale map (t runs
  # as s); FP8ML_SPLIT splits K (both reductions).
  mltiles=${FP8ML_TILES:-128te 128pte 128ptme 128ptmh}
  tiles=(); for t in $mltiles; do tiles+=(--tile "$t"); done
  splits=(); for t in ${FP8ML_SPLIT:-128ptme/3 128ptme/2w 128pte/3 128ptmh/3}; do splits+=(--tile "$t"); done
  shapes=(); for t in ${FP8ML_SHAPES:-4096x7168x16384 4096x32768x512 2048x2048x4096 4096x24576x1536}; do shapes+=(--shape "$t"); done
  step fp8ml-check 180 "$KILN" fp8 check
  step fp8ml-verify 120 "$KILN" fp8 verify --suite quick
  step fp8ml-edges 90 "$KILN" fp8 verify --shape 2048x2048x4096 --shape 40x1000x2048 \
    --shape 300x520x2048 --shape 129x392x4112 "${tiles[@]}"
  step fp8ml-edges-f32 60 "$KILN" fp8 verify --shape 200x360x1024 --out f32 "${tiles[@]}"
  step fp8ml-split 60 "$KILN" fp8 verify --shape 300x520x2048 --shape 1000x1000x7168 "${splits[@]}"
  step_json fp8ml-large 120 "$KILN" --json fp8 bench "${shapes[@]}" --scale block --reps 10 \
    "${tiles[@]}" "${tiles[@]}"
  first=${mltiles%% *}
  step_json fp8ml-ds 200 "$KILN" --json fp8 bench --set deepseek --scale block --reps 20 \
    --tile measured --tile large --tile measured --tile large --tile "$first"
  table
  echo
  labels=""; for i in 1 2; do for t in $mltiles; do labels="$labels $t#$i"; done; done
  "$PY" scripts/fp8-table.py "$D" "the shapes, each config twice (the second pass: the spread)" \
    fp8ml-large.json "$labels" "DeepSeek-V3: the rules twice each, then $first" fp8ml-ds.json \
    "measured#1 large#1 measured#2 large#2 $first" | tee "$D/summary.txt"
  ;;

formats-pair)
  [ $# -eq 2 ] || { echo "usage: bash scripts/gpu.sh formats-pair OLD_BIN NEW_BIN" >&2; exit 2; }
  OLD=$(abspath "$1"); NEW=$(abspath "$2")
  need_bin "$OLD" "$NEW"; machine "$OLD" "$NEW"
  for fam in ${PAIR_FAMILIES:-pointwise layer fp8grouped fp8 fp4 nvfp4 w4a8 e4m3}; do
    case $fam in
      pointwise) args=(pointwise verify) ;;
      layer) args=(moe verify --layer --suite quick) ;;
      fp8grouped) args=(fp8 verify --grouped --suite quick) ;;
      fp8) args=(fp8 verify --suite quick) ;;
      fp4) args=(fp4 verify --suite quick) ;;
      nvfp4) args=(moe verify --weights nvfp4) ;;
      w4a8) args=(moe verify --weights mxfp4 --act e4m3) ;;
      e4m3) args=(verify --dtype e4m3 --suite quick) ;;
      moe) args=(moe verify --suite quick) ;;
      *) echo "unknown family $fam" >&2; exit 2 ;;
    esac
    step_json "$fam-old" 90 "$OLD" --no-store --json "${args[@]}"
    step_json "$fam-new" 90 "$NEW" --no-store --json "${args[@]}"
    step "$fam-pair" 10 "$PY" scripts/verify-pair.py "$D/$fam-old.json" "$D/$fam-new.json"
  done
  for lab in old new; do
    bin=$OLD; [ $lab = new ] && bin=$NEW
    step "fuzz-$lab" 120 "$bin" --no-store fuzz --seed 1 --gemm 0 --attention 0 --moe 0 \
      --fp8 20 --moe-layer 5 --out "$D/fuzz-$lab.json" --failures "$D/failures-$lab.jsonl"
  done
  table
  ;;

benches-pair)
  [ $# -eq 2 ] || { echo "usage: bash scripts/gpu.sh benches-pair OLD_BIN NEW_BIN" >&2; exit 2; }
  OLD=$(abspath "$1"); NEW=$(abspath "$2")
  need_bin "$OLD" "$NEW"; machine "$OLD" "$NEW"
  few=(--counts 8,0,3,1 --n 2048 --k 7168)
  for fam in ${BENCH_FAMILIES:-fp8 fp8grouped gemv moe ffn nvfp4 w4a8 layer pointwise attn bwd}; do
    case $fam in
      fp8) args=(fp8 bench --shape 4096x7168x16384 --shape 64x2112x7168 --reps 10) ;;
      fp8grouped) args=(fp8 bench --grouped --groups 4 --rows 2048 --reps 10) ;;
      gemv) args=(fp4 bench --gemv --reps 20) ;;
      moe) args=(moe bench --reps 10) ;;
      ffn) args=(moe bench --swiglu --routed --reps 10) ;;
      nvfp4) args=(moe bench --weights nvfp4 --swiglu "${few[@]}" --reps 10) ;;
      w4a8) args=(moe bench --weights mxfp4 --act e4m3 "${few[@]}" --reps 10) ;;
      layer) args=(moe bench --layer E64,k8,H2048,I1408,T1+4096 --reps 10) ;;
      pointwise) args=(pointwise bench --reps 20) ;;
      attn) args=(attn bench --batch 2 --heads 16 --seqlen 4096 --dim 128 --reps 10) ;;
      bwd) args=(attn bench --backward --batch 2 --heads 16 --seqlen 4096 --dim 128 --reps 10) ;;
      *) echo "unknown family $fam" >&2; exit 2 ;;
    esac
    step_json "$fam-old" 60 "$OLD" --no-store --json "${args[@]}"
    step_json "$fam-new" 60 "$NEW" --no-store --json "${args[@]}"
    step "$fam-pair" 10 "$PY" scripts/bench-pair.py "$D/$fam-old.json" "$D/$fam-new.json"
  done
  table
  ;;

fp8wide)
  need_bin "$KILN"; machine "$KILN"
  # The 128 x 256 tile (docs/fp8.md ledger row 15) and the large rule's cluster threshold
  # (row 16). FP8W_TILES (default 256tmh 256otmh) verified at their edges: M = 1 and 64 (the
  # second consumer past M), N = 2112 (the last tile's second half past N), 300x520 (a pair's
  # second tile past M, a column tile of 8), M = 129 (no A-scale map, C from registers), f16 and
  # f32 out; then timed twice each beside 128ptme at four M = 4096 shapes; then M = 1024, 2048
  # and 3072 with DeepSeek-V3's six N x K (1.0 to 46 waves of 128 x 128 tiles) under 128pte,
  # 128ptme, 256tmh and the rule `large`; then DeepSeek-V3's set under `measured` and `large`.
  wtiles=${FP8W_TILES:-256tmh 256otmh}
  tiles=(); for t in $wtiles; do tiles+=(--tile "$t"); done
  ab=(--tile 128ptme "${tiles[@]}")
  step fp8wide-edges 90 "$KILN" fp8 verify --shape 1x256x256 --shape 64x2112x7168 \
    --shape 300x520x2048 --shape 129x257x4112 --shape 2048x2048x4096 "${tiles[@]}"
  step fp8wide-edges-out 60 "$KILN" fp8 verify --shape 200x360x1024 --shape 300x520x2048 \
    --out f32 "${tiles[@]}"
  step fp8wide-edges-f16 60 "$KILN" fp8 verify --shape 300x520x2048 --shape 4096x2112x7168 \
    --out f16 "${tiles[@]}"
  step_json fp8wide-large 120 "$KILN" --json fp8 bench --shape 4096x7168x16384 \
    --shape 4096x24576x1536 --shape 4096x32768x512 --shape 4096x4096x7168 --scale block \
    --reps 10 "${ab[@]}" "${ab[@]}"
  for pr in 128 none; do  # ledger row 17: the operands' L2 promotion against the maps' 256 B
    step_json "fp8wide-l2-$pr" 60 env KILN_TMA_PROMOTION=$pr "$KILN" --json fp8 bench \
      --shape 4096x7168x16384 --scale block --reps 10 --tile 128ptme --tile 256tmh --tile 128ptme \
      --tile 256tmh
  done
  for m in 1024 2048 3072; do
    step_json "fp8wide-m$m" 90 "$KILN" --json fp8 bench --shape ${m}x2112x7168 \
      --shape ${m}x24576x1536 --shape ${m}x32768x512 --shape ${m}x7168x16384 \
      --shape ${m}x4096x7168 --shape ${m}x7168x2048 --scale block --reps 10 \
      --tile 128pte --tile 128ptme --tile 256tmh --tile large
  done
  step_json fp8wide-ds 120 "$KILN" --json fp8 bench --set deepseek --scale block --reps 20 \
    --tile measured --tile large
  table
  echo
  labels=""; for i in 1 2; do for t in 128ptme $wtiles; do labels="$labels $t#$i"; done; done
  "$PY" scripts/fp8-table.py "$D" "four M = 4096 shapes, each config twice" fp8wide-large.json \
    "$labels" "KILN_TMA_PROMOTION=128" fp8wide-l2-128.json "128ptme#1 256tmh#1 128ptme#2 256tmh#2" \
    "KILN_TMA_PROMOTION=none" fp8wide-l2-none.json "128ptme#1 256tmh#1 128ptme#2 256tmh#2" \
    "M = 1024: single, pairs, wide pairs, the rule" fp8wide-m1024.json "128pte 128ptme 256tmh large" \
    "M = 2048" fp8wide-m2048.json "128pte 128ptme 256tmh large" "M = 3072" \
    fp8wide-m3072.json "128pte 128ptme 256tmh large" "DeepSeek-V3" fp8wide-ds.json "measured large" | tee "$D/summary.txt"
  ;;

fp8sk)
  need_bin "$KILN"; machine "$KILN"
  # Stream-K (docs/fp8.md ledger row 19): the three tile families with /k verified at their
  # edges: runs inside one tile (128x2112x7168: fewer tiles than SMs), whole waves then runs of
  # one or two K blocks (1280x2112x512, in pairs too), a ragged K's last partial block
  # (64x1000x2064, 300x520x2064), M = 1, f32 and f16 out; then the small-M shapes the rule
  # changes (and two it keeps) under `measured` (the old choice) and `large` (with /k), the
  # 128-row tile with and without /k, twice each; then 4096x2112x7168 (pairs, 4.12 waves) and
  # 1024x7168x2048 (single CTAs, 3.4 waves) with and without /k, twice; DeepSeek-V3's set.
  tiles=(--tile 128pte/k --tile 128ptme/k --tile 64x128ps/k)
  step fp8sk-edges 90 "$KILN" fp8 verify --shape 128x2112x7168 --shape 1280x2112x512 \
    --shape 64x1000x2064 --shape 1x2112x4096 --shape 300x520x2064 "${tiles[@]}"
  step fp8sk-edges-out 60 "$KILN" fp8 verify --shape 300x520x2064 --shape 1280x2112x512 \
    --out f32 "${tiles[@]}"
  step fp8sk-edges-f16 60 "$KILN" fp8 verify --shape 129x392x4112 --shape 4096x2112x7168 \
    --out f16 "${tiles[@]}"
  small=(measured large 128pte/k 128pte)
  ab=(); for t in "${small[@]}"; do ab+=(--tile "$t"); done
  step_json fp8sk-small 120 "$KILN" --json fp8 bench --scale block --reps 20 \
    --shape 64x7168x16384 --shape 64x7168x2048 --shape 128x2112x7168 --shape 128x7168x16384 \
    --shape 128x7168x2048 --shape 128x24576x1536 --shape 128x32768x512 "${ab[@]}" "${ab[@]}"
  big=(128ptme 128ptme/k 128pte 128pte/k)
  bb=(); for t in "${big[@]}"; do bb+=(--tile "$t"); done
  step_json fp8sk-big 90 "$KILN" --json fp8 bench --scale block --reps 10 \
    --shape 4096x2112x7168 --shape 1024x7168x2048 "${bb[@]}" "${bb[@]}"
  step_json fp8sk-ds 120 "$KILN" --json fp8 bench --set deepseek --scale block --reps 20 \
    --tile measured --tile large
  table
  echo
  labels=""; for i in 1 2; do for t in "${small[@]}"; do labels="$labels $t#$i"; done; done
  blabels=""; for i in 1 2; do for t in "${big[@]}"; do blabels="$blabels $t#$i"; done; done
  "$PY" scripts/fp8-table.py "$D" "small M, each config twice" fp8sk-small.json "$labels" \
    "4096x2112x7168 and 1024x7168x2048, each twice" fp8sk-big.json "$blabels" \
    "DeepSeek-V3" fp8sk-ds.json "measured large" | tee "$D/summary.txt"
  ;;

fp8slices)
  need_bin "$KILN"; machine "$KILN"
  # The large rule's slices at M <= 128 (docs/fp8.md ledger rows 20-21): the shape whose slices
  # the stream model changes (64x7168x2048, unsplit) verified beside a ragged K, and the slices
  # summed in a cluster's shared memory (c) at their edges (one tile, ragged K, M = 1, 128-row
  # tiles past M, f32 and f16 out); then the slice curves the model rests on (64x128ps in 1 to 7
  # slices, atomic and in clusters, at five M = 64 and 128 shapes), twice; the 128-row tile's
  # two slices both ways; then DeepSeek-V3's set under `measured` and `large`.
  step fp8slices-verify 60 "$KILN" fp8 verify --shape 64x7168x2048 --shape 128x7168x2048 \
    --shape 64x1000x2064 --tile large --tile 64x128ps/1
  ctiles=(--tile 64x128ps/4c --tile 64x128ps/7c --tile 128pte/2c)
  step fp8slices-cluster 90 "$KILN" fp8 verify --shape 64x2112x7168 --shape 64x1000x2064 \
    --shape 1x2112x4096 --shape 128x2112x7168 --shape 300x520x2064 "${ctiles[@]}"
  step fp8slices-cluster-out 60 "$KILN" fp8 verify --shape 300x520x2064 --out f32 "${ctiles[@]}"
  step fp8slices-cluster-f16 60 "$KILN" fp8 verify --shape 129x392x4112 --out f16 "${ctiles[@]}"
  curve=(64x128ps/1 64x128ps/2a 64x128ps/2c 64x128ps/3a 64x128ps/3c 64x128ps/4a 64x128ps/4c
    64x128ps/7a large)
  cc=(); for t in "${curve[@]}"; do cc+=(--tile "$t"); done
  step_json fp8slices-curve 120 "$KILN" --json fp8 bench --scale block --reps 20 \
    --shape 64x7168x2048 --shape 128x7168x2048 --shape 64x4096x7168 --shape 128x2112x7168 \
    --shape 64x2112x7168 "${cc[@]}" "${cc[@]}"
  step_json fp8slices-rows 90 "$KILN" --json fp8 bench --scale block --reps 10 \
    --shape 128x7168x16384 --shape 64x7168x16384 --tile 128pte/2a --tile 128pte/2c \
    --tile 64x128ps/2a --tile 64x128ps/2c --tile 128pte/2a --tile 128pte/2c
  step_json fp8slices-ds 120 "$KILN" --json fp8 bench --set deepseek --scale block --reps 20 \
    --tile measured --tile large
  table
  echo
  labels=""; for i in 1 2; do for t in "${curve[@]}"; do labels="$labels $t#$i"; done; done
  "$PY" scripts/fp8-table.py "$D" "slice curves, each config twice" fp8slices-curve.json \
    "$labels" "two slices, atomic and in clusters" fp8slices-rows.json \
    "128pte/2a#1 128pte/2c#1 64x128ps/2a 64x128ps/2c 128pte/2a#2 128pte/2c#2" \
    "DeepSeek-V3" fp8slices-ds.json "measured large" | tee "$D/summary.txt"
  ;;

fp8rows)
  need_bin "$KILN"; machine "$KILN"
  # The 128-row tiles at M = 128 with few K blocks (docs/fp8.md ledger rows 24-25): 256th (256tmh's
  # tile in single CTAs, the large rule's 256thl at 128x24576x1536), and with a CTA's last tile
  # staged in the ring (l), verified at their edges (ragged M, N and K, M = 1, a pair's second tile past
  # N, two rows of tiles, f32 and f16 out), then timed twice each beside the rule's configs at
  # the shapes they are for; then DeepSeek-V3's set under `large`.
  tiles=(--tile large --tile 256th --tile 256thl --tile 128ptel/1)
  step fp8rows-edges 60 "$KILN" fp8 verify --shape 128x32768x512 --shape 100x1000x2064 \
    --shape 1x392x512 --shape 129x520x1040 --shape 64x32768x512 "${tiles[@]}"
  step fp8rows-edges-out 60 "$KILN" fp8 verify --shape 300x520x2064 --out f32 "${tiles[@]}"
  step fp8rows-edges-f16 60 "$KILN" fp8 verify --shape 129x392x4112 --out f16 "${tiles[@]}"
  rows=(large 128pte/1 64x128ps/1 256th 256thl 128ptel/1)
  rr=(); for t in "${rows[@]}"; do rr+=(--tile "$t"); done
  step_json fp8rows-ab 120 "$KILN" --json fp8 bench --scale block --reps 20 \
    --shape 128x32768x512 --shape 128x24576x1536 --shape 64x32768x512 "${rr[@]}" "${rr[@]}"
  step_json fp8rows-ds 120 "$KILN" --json fp8 bench --set deepseek --scale block --reps 20 \
    --tile large
  table
  echo
  labels=""; for i in 1 2; do for t in "${rows[@]}"; do labels="$labels $t#$i"; done; done
  "$PY" scripts/fp8-table.py "$D" "M = 128 and 64, each config twice" fp8rows-ab.json "$labels" \
    "DeepSeek-V3" fp8rows-ds.json "large" | tee "$D/summary.txt"
  ;;

fp8chain)
  need_bin "$KILN"; machine "$KILN"
  # The dense FP8 GEMM as a programmatic dependent in a stream of launches (docs/fp8.md ledger
  # row 29): KILN_FP8_PDL=1 and 2 verified at the small-M edges (M = 1, 63, 65, 127, 129, K not a
  # multiple of 128), then `kiln fp8 bench --chain` at DeepSeek-V3's M = 64 and 128 shapes: each
  # chain in a CUDA graph, kiln plainly, under 1 and under 2 (each chain's outputs checked on
  # poisoned C against cuBLASLt's), beside cuBLASLt's chain; the figures per launch.
  n=${FP8CHAIN_N:-8}
  e=(--shape 1x392x512 --shape 63x520x1040 --shape 65x2112x7168 --shape 127x1000x2064
    --shape 129x520x1040 --shape 128x24576x1536 --tile large)
  step fp8chain-verify1 60 env KILN_FP8_PDL=1 "$KILN" fp8 verify "${e[@]}"
  step fp8chain-verify2 60 env KILN_FP8_PDL=2 "$KILN" fp8 verify "${e[@]}"
  s=(); for m in 64 128; do for nk in 2112x7168 24576x1536 32768x512 7168x16384 4096x7168 7168x2048; do
    s+=(--shape "${m}x$nk"); done; done
  step_json fp8chain 300 "$KILN" --json fp8 bench --chain "$n" --reps 15 --tile large "${s[@]}"
  table
  echo
  "$PY" scripts/fp8-table.py "$D" "chains of $n launches, per launch" fp8chain.json "plain pdl1 pdl2" |
    tee "$D/summary.txt"
  ;;

fp8parts)
  need_bin "$KILN"; machine "$KILN"
  # The promotion pipelined over parts of the consumers' columns (docs/fp8.md ledger row 18):
  # FP8P_TILES (default 256tmd: ledger row 26) verified at their edges: M = 1 and 64 (the second consumer past
  # M), N = 2112 (the last column tile past N), 300x520 (a pair's second tile past M, a column
  # tile of 8), M = 129 (no A-scale map, C from registers),
  # K = 16 (one K block: no lap of the pipelined loop), f16 and f32 out; then timed twice each
  # beside 256tmh (the drained halves) and 128ptme at five M = 4096 shapes; then DeepSeek-V3's set
  # under `large`.
  ptiles=${FP8P_TILES:-256tmd}
  tiles=(); for t in $ptiles; do tiles+=(--tile "$t"); done
  ab=(--tile 256tmh --tile 128ptme "${tiles[@]}")
  step fp8parts-edges 90 "$KILN" fp8 verify --shape 1x256x256 --shape 64x2112x7168 \
    --shape 300x520x2048 --shape 129x257x4112 --shape 129x392x16 --shape 2048x2048x4096 "${tiles[@]}"
  step fp8parts-edges-out 60 "$KILN" fp8 verify --shape 200x360x1024 --shape 300x520x2048 \
    --out f32 "${tiles[@]}"
  step fp8parts-edges-f16 60 "$KILN" fp8 verify --shape 300x520x2048 --shape 4096x2112x7168 \
    --out f16 "${tiles[@]}"
  step_json fp8parts-large 120 "$KILN" --json fp8 bench --shape 4096x7168x16384 \
    --shape 4096x2112x7168 --shape 4096x24576x1536 --shape 4096x4096x7168 --shape 4096x7168x2048 \
    --scale block --reps 10 "${ab[@]}" "${ab[@]}"
  step_json fp8parts-ds 120 "$KILN" --json fp8 bench --set deepseek --scale block --reps 20 \
    --tile large
  table
  echo
  labels=""; for i in 1 2; do for t in 256tmh 128ptme $ptiles; do labels="$labels $t#$i"; done; done
  "$PY" scripts/fp8-table.py "$D" "five M = 4096 shapes, each config twice" fp8parts-large.json \
    "$labels" "DeepSeek-V3" fp8parts-ds.json "large" | tee "$D/summary.txt"
  ;;

fp8defer)
  need_bin "$KILN"; machine "$KILN"
  # The 128 x 256 tensor-scale tile's epilogue deferred under the next tile (docs/fp8.md ledger
  # row 26): 256md (and 256mh beside it) verified at its edges with fast accumulation and promoted:
  # several tiles a CTA (4096^2), a tile of fewer K blocks than deferred chunks (K = 128), M and N
  # past the tiles (4104: a pair's second tile past M, a last column tile of 8), 1000^2 with K =
  # 1040 (a partial K block), f16 and f32 out; then each twice beside cuBLASLt at 6144^3 and
  # 8192^3, and `large`.
  d=(--tile 256mh --tile 256md)
  step fp8defer-edges-fast 60 "$KILN" fp8 verify --scale tensor --unpromoted "${d[@]}" \
    --shape 4096x4096x128 --shape 4104x4104x384 --shape 1000x1000x1040 --shape 300x520x2048
  step fp8defer-edges 60 "$KILN" fp8 verify --scale tensor "${d[@]}" \
    --shape 4096x4096x128 --shape 4104x4104x384 --shape 1000x1000x1040 --shape 300x520x2048
  step fp8defer-edges-out 60 "$KILN" fp8 verify --scale tensor --tile 256md --out f16 \
    --shape 4104x4104x384 --shape 300x520x2048
  step fp8defer-edges-f32 60 "$KILN" fp8 verify --scale tensor --unpromoted --tile 256md --out f32 \
    --shape 4104x4104x384 --shape 300x520x2048
  ab=(--tile 256mh --tile 256md --tile large)
  fast=(--tile 256mh --tile 256md --tile 256md/k --tile large)
  step fp8defer-edges-stream 60 "$KILN" fp8 verify --scale tensor --unpromoted --tile 256md/k \
    --tile 256mh/k --shape 4096x4096x1024 --shape 4104x4104x384
  step_json fp8defer-fast 120 "$KILN" --json fp8 bench --scale tensor --unpromoted --reps 10 \
    --shape 6144x6144x6144 --shape 8192x8192x8192 "${fast[@]}" "${fast[@]}"
  step_json fp8defer-promoted 120 "$KILN" --json fp8 bench --scale tensor --reps 10 \
    --shape 6144x6144x6144 --shape 8192x8192x8192 "${ab[@]}" "${ab[@]}"
  table
  echo
  labels=""; for i in 1 2; do for t in 256mh 256md large; do labels="$labels $t#$i"; done; done
  flabels=""; for i in 1 2; do for t in 256mh 256md 256md/k large; do flabels="$flabels $t#$i"; done; done
  "$PY" scripts/fp8-table.py "$D" "fast accumulation, each config twice" fp8defer-fast.json \
    "$flabels" "promoted, each config twice" fp8defer-promoted.json "$labels" | tee "$D/summary.txt"
  ;;

backward)
  need_bin "$KILN"; machine "$KILN"
  step attn-bwd-verify 580 "$KILN" attn verify --backward --suite "${BWD_SUITE:-full}"
  bwd_bench
  ;;

bwd-wgmma)
  # A WGMMA backward's first device run (about 6 min on an H200): verified before it is timed.
  need_bin "$KILN"; machine "$KILN"
  V=${BWD_WGMMA:-bwd_fa3_wgmma}
  step bwd-wgmma-compile 90 "$KILN" check --version "$V"
  step bwd-wgmma-quick 90 "$KILN" attn verify --backward --suite quick --version "$V"
  step bwd-wgmma-gqa-causal 90 "$KILN" attn verify --backward --version "$V" --batch 2 --heads 4 --kv-heads 2 \
    --seqlen 1000 --dim 128 --causal
  step bwd-wgmma-ragged-bhsd 90 "$KILN" attn verify --backward --version "$V" --batch 1 --heads 3 --kv-heads 1 \
    --seqlen-q 700 --seqlen-kv 1300 --dim 64 --causal --layout BHSD --dtype f16
  step bwd-wgmma-determ 90 "$KILN" attn verify --backward --version "$V" --batch 1 --heads 2 --seqlen 1000 \
    --dim 128 --causal --deterministic
  bwd_bench
  ;;

bwd-bulk-dq)
  # bwd_fa3_bulk_dq's first device run (about 8 min on an H200): verified, its d128 dQ split by
  # columns and by keys (KILN_BWD_DQ_KEYS=1), then timed beside bwd_fa3_wgmma at the 13 shapes
  # (the d128 ones also split by keys), and SDPA's backwards.
  need_bin "$KILN"; machine "$KILN"
  bwd_staged_verify bulk-dq bwd_fa3_bulk_dq
  BWD_VERSION="bwd_fa3_wgmma bwd_fa3_bulk_dq" BWD_KEYS=1 bwd_bench
  ;;

bwd-tma-dq)
  # bwd_fa3_tma_dq's first full device run (about 8 min on an H200): verified as bwd-bulk-dq
  # verifies bwd_fa3_bulk_dq, then timed beside bwd_fa3_bulk_dq (the default) at the 13 shapes
  # (the d128 ones also split by keys), and SDPA's backwards.
  need_bin "$KILN"; machine "$KILN"
  bwd_staged_verify tma-dq bwd_fa3_tma_dq
  BWD_VERSION="bwd_fa3_bulk_dq bwd_fa3_tma_dq" BWD_KEYS=bwd_fa3_tma_dq bwd_bench
  ;;

bwd-lookahead)
  # bwd_fa3_lookahead's first full device run (about 7 min on an H200): verified (it has no key
  # split), then timed beside bwd_fa3_tma_dq (the default) at the 13 shapes and SDPA's backwards.
  need_bin "$KILN"; machine "$KILN"
  bwd_staged_verify lookahead bwd_fa3_lookahead nokeys
  step lookahead-quick-desc-only 90 env KILN_BWD_NO_AHEAD=1 "$KILN" attn verify --backward --suite quick \
    --version bwd_fa3_lookahead
  # the descriptors by adds alone (KILN_BWD_NO_AHEAD=1), beside the default walk, at three shapes
  for shape in "2 16 8192 128" "4 32 4096 128 --causal" "4 16 4096 64"; do
    set -- $shape
    step "lookahead-desc-only-d$4-b$1-h$2${5:+-causal}" 120 env KILN_BWD_NO_AHEAD=1 "$KILN" attn bench --backward \
      --batch "$1" --heads "$2" --seqlen "$3" --dim "$4" ${5:-} --version bwd_fa3_lookahead --reps 10 --warmup 3
  done
  BWD_VERSION="bwd_fa3_tma_dq bwd_fa3_lookahead" bwd_bench
  ;;

bwd-m128)
  # bwd_fa3_m128's first full device run (about 5 min on an H200): verified at d64, its only head
  # dim (the quick suite's 18 d64 problems with each walk, GQA causal, ragged BHSD f16, two
  # deterministic runs), then timed beside bwd_fa3_lookahead (the default) at the 13 shapes (its
  # rows at the 4 d64 ones) and SDPA's backwards.
  need_bin "$KILN"; machine "$KILN"
  bwd_dim_verify m128 bwd_fa3_m128 64
  step m128-quick-no-ahead 90 env KILN_BWD_NO_AHEAD=1 "$KILN" attn verify --backward --suite quick \
    --version bwd_fa3_m128 --dim 64
  step m128-determ-4097 90 "$KILN" attn verify --backward --version bwd_fa3_m128 --batch 2 --heads 2 --seqlen 4097 \
    --dim 64 --deterministic
  BWD_VERSION="bwd_fa3_lookahead bwd_fa3_m128@64" bwd_bench
  ;;

bwd-ordered-eager)
  # bwd_fa3_ordered_eager verified (two runs of every deterministic problem bitwise equal; grids of
  # 153 blocks, more than the SMs, so that the rotated order's wave groups and the descending
  # order's late blocks are exercised), then the deterministic shapes timed beside the ordered
  # atomics and the non-deterministic default on the same shape (the 0.85x target is against it).
  # (bwd_fa3_ordered_dq, the late writer this task first timed it beside, was removed on 2026-11-30.)
  need_bin "$KILN"; machine "$KILN"
  V=bwd_fa3_ordered_eager
  # (compiled first, in parallel: the verify compiles what it lacks one kernel at a time, and the
  # whole quick suite cold did not finish in 80 s at the mid-way run, 2026-11-29)
  step od-compile 90 "$KILN" check --version "$V"
  step od-compile-lookahead 90 "$KILN" check --version bwd_fa3_lookahead
  step od-compile-m128 90 "$KILN" check --version bwd_fa3_m128
  step od-compile-m128-fma 90 "$KILN" check --version bwd_fa3_m128_fma
  step od-quick-d64 90 "$KILN" attn verify --backward --suite quick --version "$V" --dim 64
  step od-quick-d128 90 "$KILN" attn verify --backward --suite quick --version "$V" --dim 128
  # the shapes that hung until 2026-11-29 (a rotated group one query block apart; det_schedule.rs)
  step od-hang-q65-kv200 30 "$KILN" attn verify --backward --version "$V" --batch 2 --heads 4 --kv-heads 2 \
    --seqlen-q 65 --seqlen-kv 200 --dim 128 --deterministic
  step od-hang-d64-s4096 60 "$KILN" attn verify --backward --version "$V" --batch 1 --heads 2 --seqlen 4096 \
    --dim 64 --deterministic
  step od-gqa-causal 90 "$KILN" attn verify --backward --version "$V" --batch 2 --heads 4 --kv-heads 2 \
    --seqlen 1000 --dim 128 --causal --deterministic
  step od-ragged-bhsd 90 "$KILN" attn verify --backward --version "$V" --batch 1 --heads 3 --kv-heads 1 \
    --seqlen-q 700 --seqlen-kv 1300 --dim 64 --causal --layout BHSD --dtype f16 --deterministic
  step od-waves-d128 90 "$KILN" attn verify --backward --version "$V" --batch 1 --heads 9 --seqlen 2049 \
    --dim 128 --deterministic
  step od-waves-d64-causal 90 "$KILN" attn verify --backward --version "$V" --batch 1 --heads 9 --seqlen 2049 \
    --dim 64 --causal --deterministic
  # (each shape names the default's version when not deterministic: `bench` without --version
  # times every version)
  for shape in "bwd_fa3_lookahead 2 16 8192 128" "bwd_fa3_lookahead 2 16 8192 128 --causal" \
    "bwd_fa3_lookahead 4 32 4096 128 --causal" "bwd_fa3_m128_fma 4 16 4096 64" \
    "bwd_fa3_m128_fma 1 16 16384 64 --causal"; do
    set -- $shape
    # the version it replaced: the ordered atomics
    det=bwd_fa3_lookahead; [ "$5" = 64 ] && det=bwd_fa3_m128
    n="d$5-b$2-h$3-s$4${6:+-causal}"
    step "od-det-$n" 60 "$KILN" attn bench --backward --batch "$2" --heads "$3" --seqlen "$4" --dim "$5" ${6:-} \
      --deterministic --version "$det" --version "$V" --reps 10 --warmup 3
    step "od-free-$n" 60 "$KILN" attn bench --backward --batch "$2" --heads "$3" --seqlen "$4" --dim "$5" ${6:-} \
      --version "$1" --reps 10 --warmup 3
  done
  table
  ;;

bwd-dq-late)
  # bwd_fa3_dq_late's first full device run (about 6 min on an H200): verified as bwd-lookahead
  # verifies bwd_fa3_lookahead (no key split), then timed beside it at the 13 shapes and SDPA's
  # backwards.
  need_bin "$KILN"; machine "$KILN"
  bwd_staged_verify dq-late bwd_fa3_dq_late nokeys
  step dq-late-gqa-causal-d64 90 "$KILN" attn verify --backward --version bwd_fa3_dq_late --batch 2 --heads 4 \
    --kv-heads 2 --seqlen 1000 --dim 64 --causal
  BWD_VERSION="bwd_fa3_lookahead bwd_fa3_dq_late" bwd_bench
  ;;

bwd-m128-rows | bwd-m128-fma)
  # bwd_fa3_m128_rows (d64, 128 query rows a step, dQ split by query rows: each dQ element added
  # once a block) verified at d64, then timed beside bwd_fa3_m128 and bwd_fa3_lookahead at the 4
  # d64 shapes of `backward` and SDPA's backwards on them (about 3 min on an H200).
  # bwd-m128-fma: bwd_fa3_m128_fma (the same with dSᵀ in packed bf16 pairs) the same way, timed
  # beside bwd_fa3_m128_rows too, and at B4 H16 S4096 with KILN_BWD_EXP_POLY=2 and 3 (that many of
  # every 8 exponentials on the FMA pipe; about 4 min).
  need_bin "$KILN"; machine "$KILN"
  n=${task#bwd-}
  V=bwd_fa3_${n//-/_}
  bwd_dim_verify "$n" "$V" 64
  step "$n-determ-4097" 90 "$KILN" attn verify --backward --version "$V" --batch 2 --heads 2 --seqlen 4097 \
    --dim 64 --deterministic
  others=(--version bwd_fa3_lookahead --version bwd_fa3_m128)
  [ "$V" = bwd_fa3_m128_rows ] || others+=(--version bwd_fa3_m128_rows)
  shapes=""
  for shape in "4 4096" "4 4096 --causal" "1 16384" "1 16384 --causal"; do
    set -- $shape
    step "$n-bench-b$1-s$2${3:+-causal}" 120 "$KILN" attn bench --backward --batch "$1" --heads 16 \
      --seqlen "$2" --dim 64 ${3:-} "${others[@]}" --version "$V" --reps 10 --warmup 3
    shapes="$shapes;$1,16,$2,64${3:+,causal}"
  done
  if [ "$V" = bwd_fa3_m128_fma ]; then
    for e in 2 3; do
      step "$n-bench-b4-s4096-exp-poly-$e" 60 env KILN_BWD_EXP_POLY=$e "$KILN" attn bench --backward --batch 4 \
        --heads 16 --seqlen 4096 --dim 64 --version "$V" --reps 10 --warmup 3
    done
  fi
  step peers-backward-d64 300 "$PY" scripts/peers.py backward --reps 10 --shapes "${shapes#;}"
  table
  ;;

bwd-d256)
  # bwd_fa3_d256 (the d256 default since its first H200 run) verified at d256 (each <= 90 s), then
  # timed beside bwd_fa2_mma_sync at the 4 d256 shapes of `backward`, and SDPA's cuDNN and FLASH
  # backwards on the four (about 3 min on an H200).
  need_bin "$KILN"; machine "$KILN"
  bwd_dim_verify d256 bwd_fa3_d256 256
  step d256-determ-777 90 "$KILN" attn verify --backward --version bwd_fa3_d256 --batch 2 --heads 2 --seqlen 777 \
    --dim 256 --deterministic
  shapes=""
  for shape in "4 4096" "4 4096 --causal" "1 16384" "1 16384 --causal"; do
    set -- $shape
    # (the two it was written for; bwd-d256-dq times the staged versions once verified)
    step "d256-bench-b$1-s$2${3:+-causal}" 120 "$KILN" attn bench --backward --batch "$1" --heads 16 --seqlen "$2" \
      --dim 256 ${3:-} --version bwd_fa2_mma_sync --version bwd_fa3_d256 --reps 10 --warmup 3
    shapes="$shapes;$1,16,$2,256${3:+,causal}"
  done
  step peers-backward-d256 300 "$PY" scripts/peers.py backward --reps 10 --shapes "${shapes#;}"
  table
  ;;

bwd-d256-dq)
  # bwd_fa3_d256_tma and bwd_fa3_d256_pair verified at d256 (each <= 90 s), then each that passed
  # every check timed beside bwd_fa3_d256 at the 4 d256 shapes of `backward`, and SDPA's cuDNN and
  # FLASH backwards on them.
  need_bin "$KILN"; machine "$KILN"
  timed=(--version bwd_fa3_d256)
  for V in bwd_fa3_d256_tma bwd_fa3_d256_pair; do
    n=${V#bwd_fa3_}
    s0=$status; status=0
    bwd_dim_verify "$n" "$V" 256
    # 33 key blocks (the pair's grid rounded up to 34) and 9 heads, causal with Skv != Sq; then
    # deterministic (verify runs it twice and compares the bits)
    step "$n-odd-grid" 90 "$KILN" attn verify --backward --version "$V" --batch 1 --heads 9 --seqlen-q 1000 \
      --seqlen-kv 2049 --dim 256 --causal
    step "$n-determ-777" 90 "$KILN" attn verify --backward --version "$V" --batch 2 --heads 2 --seqlen 777 \
      --dim 256 --deterministic
    # timed only once verified
    [ $status -eq 0 ] && timed+=(--version "$V")
    status=$((s0 | status))
  done
  shapes=""
  for shape in "4 4096" "4 4096 --causal" "1 16384" "1 16384 --causal"; do
    set -- $shape
    step "d256-dq-bench-b$1-s$2${3:+-causal}" 120 "$KILN" attn bench --backward --batch "$1" --heads 16 --seqlen "$2" \
      --dim 256 ${3:-} "${timed[@]}" --reps 10 --warmup 3
    shapes="$shapes;$1,16,$2,256${3:+,causal}"
  done
  step peers-backward-d256 300 "$PY" scripts/peers.py backward --reps 10 --shapes "${shapes#;}"
  table
  ;;

bwd-rounds)
  # Under sustained load an H200 sits at its 700 W cap (1.47-1.77 GHz, where a short run sees up to
  # 1.98): timed in separate processes the same d128 kernel measured 555-617 TFLOPS across calls
  # (2026-11-30). Interleaved, kiln and the peers see one clock, so their ratio holds.
  sh="2,16,8192,128;2,16,8192,128,causal;4,32,4096,128,causal;4,16,4096,64;4,16,4096,64,causal;1,16,16384,64"
  sh="$sh;1,16,16384,64,causal;4,16,4096,256;4,16,4096,256,causal;1,16,16384,256;1,16,16384,256,causal"
  for r in $(seq "${BWD_ROUNDS:-3}"); do
    step "bwd-round-$r" 300 "$PY" scripts/peers.py backward --kiln --kiln-det --interleave --backends cudnn,flash \
      --reps 10 --warmup 2 --warmup-ms "${BWD_WARMUP_MS:-1000}" --shapes "$sh"
  done
  table
  ;;

bwd-window)
  # The sliding window's backward (ledger B13): verified, then timed beside the dense causal run.
  need_bin "$KILN"; machine "$KILN"
  v=("$KILN" attn verify --backward --version bwd_fa3_lookahead)
  # The forward that makes O and LSE, alone, at the failing family of d63c528: a ragged last
  # query block of at most 64 rows (Sq mod 192 in 1..64), non-causal, a bounded left side; that
  # block is split between two consumers, whose window mask took the wrong rows until 2026-11-29.
  step bwin-fwd-split-d128 60 "$KILN" attn verify --batch 2 --heads 8 --kv-heads 2 --seqlen-q 1000 --seqlen-kv 1300 \
    --dim 128 --window 128,16
  step bwin-fwd-split-d64 60 "$KILN" attn verify --heads 2 --seqlen-q 40 --seqlen-kv 1000 --dim 64 --window 300,0
  step bwin-gqa-d128 90 "${v[@]}" --batch 2 --heads 8 --kv-heads 2 --seqlen-q 1000 --seqlen-kv 1300 --dim 128 \
    --window 128,16
  step bwin-square-1000 90 "${v[@]}" --batch 2 --heads 8 --kv-heads 2 --seqlen 1000 --dim 128 --window 128,16
  step bwin-left-only 90 "${v[@]}" --heads 4 --kv-heads 2 --seqlen-q 1000 --seqlen-kv 1300 --dim 64 --window 128,-1 \
    --dtype f16
  step bwin-unseen-keys 90 "${v[@]}" --seqlen-q 64 --seqlen-kv 320 --dim 128 --window 16,16
  step bwin-causal-f16-bhsd-d64 90 "${v[@]}" --heads 4 --kv-heads 1 --seqlen 777 --dim 64 --causal \
    --window 300,-1 --dtype f16 --layout BHSD
  step bwin-right-only-f16 90 "${v[@]}" --batch 3 --heads 2 --seqlen 513 --dim 64 --window -1,32 --dtype f16
  step bwin-one-query-row 90 "${v[@]}" --heads 2 --kv-heads 1 --seqlen-q 1 --seqlen-kv 4097 --dim 128 \
    --window 64,64
  step bwin-det-causal-d128 90 "${v[@]}" --heads 4 --seqlen 1000 --dim 128 --causal --window 256,0 \
    --deterministic
  step bwin-det-diagonal-d64 90 "${v[@]}" --heads 2 --seqlen 4097 --dim 64 --window 0,0 --deterministic
  # The packed backward (ledger B14): its suite (24 problems, d64/d128), a drawn batch of 32 with
  # GQA, causal and a window, then 32 sequences of 128..8192 timed against one dense backward of
  # the same work.
  step bvar-suite 120 "$KILN" attn verify --backward --varlen-suite
  step bvar-32-gqa-window 90 "$KILN" attn verify --backward --varlen-count 32 --varlen-range 128:1024 --seed 1 \
    --heads 8 --kv-heads 2 --dim 128 --causal --window 256,0
  vb=("$KILN" attn bench --backward --varlen-count 32 --seed 1 --heads 16 --reps 10 --warmup 3)
  step bvar-bench-d128 90 "${vb[@]}" --dim 128
  step bvar-bench-d128-causal 90 "${vb[@]}" --dim 128 --causal
  step bvar-bench-d64 90 "${vb[@]}" --dim 64
  # The window's speed at d128 (d64 and the two-sided window: measured at d63c528, ledger B13).
  b=("$KILN" attn bench --backward --version bwd_fa3_lookahead --reps 10 --warmup 3)
  step bwin-d128-dense-causal 60 "${b[@]}" --batch 2 --heads 16 --seqlen 8192 --dim 128 --causal
  step bwin-d128-causal-1024 60 "${b[@]}" --batch 2 --heads 16 --seqlen 8192 --dim 128 --causal --window 1024,0
  table
  ;;

moe)
  need_bin "$KILN"; machine "$KILN"
  step_json moe-verify 300 "$KILN" --json moe verify --suite "${MOE_SUITE:-quick}"
  # The issue's shapes: prefill (E=8, 7516 rows uneven, N=3072, K=4096) and two small-M ones.
  PREFILL=1512,1091,539,772,779,979,880,964
  SMALL1=40,248,112,176,64,200,136,96
  SMALL2=40,196,88,152,64,120,180,104
  bench() { # name, kiln args..., -- peer args...
    local name=$1; shift
    local kargs=() pargs=()
    while [ "$1" != "--" ]; do kargs+=("$1"); shift; done; shift
    pargs=("$@")
    step_json "kiln-$name" 120 "$KILN" --json moe bench "${kargs[@]}"
    step_json "torch-$name" 180 "$PY" scripts/peers.py moe "${pargs[@]}"
  }
  bench prefill --counts $PREFILL --n 3072 --k 4096 -- --counts $PREFILL --n 3072 --k 4096
  bench small_m_4096x7168 --counts $SMALL1 --n 4096 --k 7168 -- --counts $SMALL1 --n 4096 --k 7168
  bench small_m_7168x2048 --counts $SMALL2 --n 7168 --k 2048 -- --counts $SMALL2 --n 7168 --k 2048
  bench ffn_prefill --counts $PREFILL --n 3072 --k 4096 --swiglu -- --counts $PREFILL --n 3072 --k 4096 --swiglu
  bench ffn_prefill_interleaved --counts $PREFILL --n 3072 --k 4096 --swiglu --interleaved -- --counts $PREFILL --n 3072 --k 4096 --swiglu
  if [ "${MOE_SWEEP:-0}" != 0 ]; then
    # Every compiled tile shape of the grouped GEMM: is the wave-quantisation choice the fastest?
    for shape in "prefill $PREFILL 3072 4096" "small_m_4096x7168 $SMALL1 4096 7168" "small_m_7168x2048 $SMALL2 7168 2048"; do
      set -- $shape
      for tile in 128x256 128x192 128x128 64x256; do
        KILN_MOE_TILE=$tile step_json "sweep-$1-$tile" 120 "$KILN" --no-store --json moe bench --counts "$2" --n "$3" --k "$4"
      done
    done
  fi
  table
  echo
  "$PY" - "$D" <<'EOF' | tee "$D/summary.txt" || status=1
import json, os, sys
d = sys.argv[1]
def load(p):
    try:
        return json.load(open(os.path.join(d, p)))
    except Exception as e:
        return {"error": f"no result ({e})"}
try:
    rows = json.load(open(os.path.join(d, "moe-verify.json")))
    print(f"verify: {len(rows)} checks, {sum(1 for r in rows if not r['passed'])} failed")
except Exception as e:
    print(f"verify: no JSON ({e}); see moe-verify.err")
names = ["prefill", "small_m_4096x7168", "small_m_7168x2048", "ffn_prefill", "ffn_prefill_interleaved"]
res = {n: {"kiln": load(f"kiln-{n}.json"), "torch": load(f"torch-{n}.json")} for n in names}
# (shape, kiln piece, torch key, target ratio torch_ms / kiln_ms)
want = [("prefill", "grouped_gemm", "grouped_mm", 1.05), ("small_m_4096x7168", "grouped_gemm", "grouped_mm", 1.05),
        ("small_m_7168x2048", "grouped_gemm", "grouped_mm", 1.05), ("ffn_prefill", "swiglu_dual", "swiglu", 1.35),
        ("ffn_prefill_interleaved", "swiglu_dual", "swiglu", 1.35), ("ffn_prefill", "down_proj", "down_proj", 1.05),
        ("ffn_prefill", "ffn", "ffn", None)]
print(f"{'shape':26} {'piece':13} {'kiln ms':>9} {'kiln TF':>8} {'torch ms':>9} {'torch TF':>9} {'x torch':>8} {'target':>7}")
for shape, piece, tkey, target in want:
    k = next((t for t in res[shape]["kiln"].get("rows", []) if t["piece"] == piece), None)
    t = res[shape]["torch"].get(tkey)
    if not k or not t:
        print(f"{shape:26} {piece:13} missing: kiln {res[shape]['kiln'].get('error', '')} torch {res[shape]['torch'].get('error', '')}")
        continue
    ratio = t["median_ms"] / k["median_ms"]
    verdict = "" if target is None else ("met" if ratio >= target else "MISSED")
    print(f"{shape:26} {piece:13} {k['median_ms']:9.4f} {k['tflops']:8.1f} {t['median_ms']:9.4f} {t['tflops']:9.1f} {ratio:8.3f} {'' if target is None else target:>7} {verdict:6} {k.get('tile', '')}")
for f in sorted(os.listdir(d)):
    if f.startswith("sweep-") and f.endswith(".json"):
        r = load(f)
        row = r["rows"][0] if r.get("rows") else r
        print(f"tile sweep {f[6:-5]}: {row.get('median_ms', float('nan')):.4f} ms")
EOF
  ;;

fp4moe)
  need_bin "$KILN"; machine "$KILN"
  step fp4-prepack 120 "$KILN" --no-store moe prepack --weights nvfp4 --experts 2 --n 2048 --k 7168 --swiglu
  step_json fp4-verify-nvfp4 300 "$KILN" --no-store --json moe verify --weights nvfp4
  step_json fp4-verify-mxfp4 300 "$KILN" --no-store --json moe verify --weights mxfp4
  # decode: 64 tokens top-8 = 512 rows on 199 of 256 experts (114 with 3 rows, 85 with 2)
  DECODE=$("$PY" -c 'import random; c=[3]*114+[2]*85+[0]*57; random.Random(35).shuffle(c); print(",".join(map(str,c)))')
  for w in nvfp4 mxfp4; do
    step_json "fp4-decode-swiglu-$w" 300 "$KILN" --no-store --json moe bench --weights $w --counts "$DECODE" --n 2048 --k 7168 --swiglu --routed
  done
  step_json fp4-decode-gemm-nvfp4 300 "$KILN" --no-store --json moe bench --weights nvfp4 --counts "$DECODE" --n 2048 --k 7168
  # prefill: 4096 tokens top-8 = 32,768 rows over the 256 experts, unevenly
  step_json fp4-prefill-swiglu-nvfp4 300 "$KILN" --no-store --json moe bench --weights nvfp4 --experts 256 --tokens 32768 --n 2048 --k 7168 --swiglu --routed
  step_json fp4-prefill-gemm-nvfp4 300 "$KILN" --no-store --json moe bench --weights nvfp4 --experts 256 --tokens 32768 --n 2048 --k 7168
  # torch's bf16 path on the same prefill counts (grouped_mm + silu·mul): the issue's 2.5x target
  counts=$("$PY" -c 'import json, sys; print(",".join(map(str, json.load(open(sys.argv[1]))["counts"])))' \
    "$D/fp4-prefill-swiglu-nvfp4.json" 2>/dev/null)
  [ -n "$counts" ] && step_json peers-prefill-swiglu 300 "$PY" scripts/peers.py moe --counts "$counts" --n 2048 --k 7168 --swiglu
  table
  echo
  "$PY" - "$D" <<'EOF' | tee "$D/summary.txt" || status=1
import json, os, sys
d = sys.argv[1]
def load(p):
    try:
        return json.load(open(os.path.join(d, p)))
    except Exception as e:
        return {"error": f"no result ({e})"}
for w in ("nvfp4", "mxfp4"):
    r = load(f"fp4-verify-{w}.json")
    if isinstance(r, list):
        errs = [x["rel_error"] for x in r if isinstance(x.get("rel_error"), float) and x["rel_error"] == x["rel_error"]]
        print(f"verify {w}: {len(r)} checks, {sum(1 for x in r if not x['passed'])} failed, worst rel error {max(errs, default=float('nan')):.2e}")
    else:
        print(f"verify {w}: {r.get('error')}")
# (file, target speed-up over kiln's bf16 kernel, target fraction of the copy ceiling)
want = [("fp4-decode-swiglu-nvfp4", 3.0, 0.80), ("fp4-decode-swiglu-mxfp4", 3.0, 0.80), ("fp4-decode-gemm-nvfp4", None, None),
        ("fp4-prefill-swiglu-nvfp4", 1.6, None), ("fp4-prefill-gemm-nvfp4", None, None)]
print(f"{'shape':26} {'bf16 us':>9} {'4-bit us':>9} {'x bf16':>7} {'GB/s':>6} {'of copy':>8}  target")
for name, sp, frac in want:
    r = load(name + ".json")
    rows = r.get("rows") or []
    if len(rows) != 2:
        print(f"{name:26} missing: {r.get('error', 'no rows')}")
        continue
    b, f = rows
    ok = (sp is None or f["speedup"] >= sp) and (frac is None or f["copy_fraction"] >= frac)
    tgt = "" if sp is None else f">= {sp}x" + ("" if frac is None else f", >= {frac:.0%} of copy") + (" met" if ok else " MISSED")
    print(f"{name[4:]:26} {b['median_us']:9.1f} {f['median_us']:9.1f} {f['speedup']:7.2f} {f['gbps']:6.0f} {100 * f['copy_fraction']:7.1f}%  {tgt}")
peer = load("peers-prefill-swiglu.json").get("swiglu") or {}
kiln = (load("fp4-prefill-swiglu-nvfp4.json").get("rows") or [{}, {}])[-1]
if "median_ms" in peer and "median_us" in kiln:
    x = peer["median_ms"] * 1e3 / kiln["median_us"]
    print(f"prefill swiglu nvfp4 against torch's bf16 grouped_mm + silu·mul ({peer.get('variant', '')}): "
          f"{peer['median_ms'] * 1e3:.1f} us, {x:.2f}x  >= 2.5x {'met' if x >= 2.5 else 'MISSED'}")
EOF
  ;;

fp4ab)
  need_bin "$KILN"; machine "$KILN"
  decode_counts
  part=${1:-all}  # verify, time or all (two device calls if one cannot hold both)
  if [ "$part" != time ]; then
  # every new path verified before it is timed
  step_json verify-dq-nvfp4 200 env KILN_FP4_PATH=dq "$KILN" --no-store --json moe verify --weights nvfp4
  step_json verify-dq-mxfp4 200 env KILN_FP4_PATH=dq "$KILN" --no-store --json moe verify --weights mxfp4
  step_json verify-ctas2-nvfp4 200 env KILN_FP4_CTAS=2 "$KILN" --no-store --json moe verify --weights nvfp4
  step_json verify-w4a8 200 "$KILN" --no-store --json moe verify --weights mxfp4 --act e4m3
  step_json verify-64rows 60 "$KILN" --no-store --json moe verify --weights nvfp4 --counts "$DECODE64" "${SW[@]}"
  step_json verify-512rows-w4a8 60 "$KILN" --no-store --json moe verify --weights mxfp4 --act e4m3 --counts "$DECODE" "${SW[@]}"
  fi
  if [ "$part" != verify ]; then
  for r in 1 2; do
    for path in rs dq; do
      step_json "e64-$path-$r" 120 env KILN_FP4_PATH=$path "$KILN" --no-store --json moe bench --weights nvfp4 \
        --experts 64 --tokens 8192 --n 1408 --k 2048 --swiglu --routed
    done
  done
  for path in rs dq; do
    step_json "prefill-$path" 120 env KILN_FP4_PATH=$path "$KILN" --no-store --json moe bench --weights nvfp4 \
      --experts 256 --tokens 32768 "${SW[@]}"
  done
  decode_ab KILN_FP4_CTAS ctas 1 2
  step_json w4a8-prefill 120 "$KILN" --no-store --json moe bench --weights mxfp4 --act e4m3 --experts 256 --tokens 32768 "${SW[@]}"
  step_json w4a8-e64 120 "$KILN" --no-store --json moe bench --weights mxfp4 --act e4m3 --experts 64 --tokens 8192 \
    --n 1408 --k 2048 --swiglu --routed
  step_json w4a8-decode512 120 "$KILN" --no-store --json moe bench --weights mxfp4 --act e4m3 --counts "$DECODE" "${SW[@]}"
  fi
  table
  echo
  "$PY" scripts/fp4ab-table.py "$D" | tee "$D/summary.txt" || status=1
  ;;

fp4b)
  need_bin "$KILN"; machine "$KILN"
  decode_counts
  part=${1:-all}  # verify, time or all
  if [ "$part" != time ]; then
  # the split tail verified before it is timed: the suites (whatever tails they make) and the
  # issue's decode counts, where the last wave splits (512 rows: 16 tiles in 8 slices; 64 rows:
  # 104 tiles in 2)
  step_json verify-tail-nvfp4 90 env KILN_FP4_TAIL=8 "$KILN" --no-store --json moe verify --weights nvfp4
  step_json verify-tail-mxfp4 90 env KILN_FP4_TAIL=8 "$KILN" --no-store --json moe verify --weights mxfp4
  step_json verify-tail-512rows 60 env KILN_FP4_TAIL=8 "$KILN" --no-store --json moe verify --weights nvfp4 --counts "$DECODE" "${SW[@]}"
  step_json verify-tail-64rows 60 env KILN_FP4_TAIL=8 "$KILN" --no-store --json moe verify --weights mxfp4 --counts "$DECODE64" "${SW[@]}"
  step gemv-async-verify 90 env KILN_FP4_GEMV=async "$KILN" --no-store fp4 verify --suite quick
  fi
  if [ "$part" != verify ]; then
  decode_ab KILN_FP4_TAIL tail 1 8
  gemv_ab regs async "1 8192 8192" "1 4096 4096" "4 14336 4096" "4 8192 8192"
  fi
  table
  echo
  "$PY" scripts/fp4ab-table.py "$D" | tee "$D/summary.txt" || status=1
  gemv_summary gemv-async-verify
  ;;

fp4gemv)
  need_bin "$KILN"; machine "$KILN"
  part=${1:-all}  # verify, time or all
  if [ "$part" != time ]; then
  step gemv-wide-verify 90 env KILN_FP4_GEMV=wide "$KILN" --no-store fp4 verify --suite quick
  fi
  if [ "$part" != verify ]; then
  gemv_ab regs wide "1 8192 8192" "4 14336 4096" "16 8192 8192" "1 4096 4096"
  fi
  table
  echo
  gemv_summary gemv-wide-verify
  ;;

fp4lean)
  need_bin "$KILN"; machine "$KILN"
  decode_counts
  part=${1:-all}  # verify, time or all
  if [ "$part" != time ]; then
  # each new path verified before it is timed
  step gemv-lean-verify 90 env KILN_FP4_GEMV=lean "$KILN" --no-store fp4 verify --suite quick
  step_json verify-shift-nvfp4 90 env KILN_FP4_DECODE=shift "$KILN" --no-store --json moe verify --weights nvfp4
  step_json verify-shift-mxfp4 90 env KILN_FP4_DECODE=shift "$KILN" --no-store --json moe verify --weights mxfp4
  step_json verify-shift-512rows 60 env KILN_FP4_DECODE=shift "$KILN" --no-store --json moe verify --weights nvfp4 --counts "$DECODE" "${SW[@]}"
  fi
  if [ "$part" != verify ]; then
  gemv_ab wide lean "1 8192 8192" "4 14336 4096" "1 4096 4096" "2 8192 8192"
  decode_ab KILN_FP4_DECODE decode rot shift
  fi
  table
  echo
  "$PY" scripts/fp4ab-table.py "$D" | tee "$D/summary.txt" || status=1
  gemv_summary gemv-lean-verify
  ;;

fp4xring)
  need_bin "$KILN"; machine "$KILN"
  part=${1:-all}  # verify, time or all
  # the layer's routed counts at T tokens: E64, 8 distinct experts a token (seeded)
  layer_counts() { "$PY" -c "import random; r=random.Random($1 + 40); c=[0]*64
for t in range($1):
  for e in r.sample(range(64), 8): c[e] += 1
print(','.join(map(str, c)))"; }
  LSW=(--n 1408 --k 2048 --swiglu --routed)
  LDOWN=(--n 2048 --k 1408)
  if [ "$part" != time ]; then
  # each new path verified before it is timed
  step gemv-xring-verify 120 env KILN_FP4_GEMV=xring "$KILN" --no-store fp4 verify --suite full
  # the grouped GEMM's paired 8-token tile (KILN_FP4_PAIR=all) over both 4-bit suites
  step_json verify-pair-nvfp4 120 env KILN_FP4_PAIR=all "$KILN" --no-store --json moe verify --weights nvfp4
  step_json verify-pair-mxfp4 120 env KILN_FP4_PAIR=all "$KILN" --no-store --json moe verify --weights mxfp4
  for t in 1 4 8; do
    c=$(layer_counts $t)
    step_json "verify-tail8-t$t-swiglu" 60 env KILN_FP4_TAIL=8 "$KILN" --no-store --json moe verify --weights nvfp4 --counts "$c" "${LSW[@]}"
    step_json "verify-tail8-pair-t$t-down" 60 env KILN_FP4_TAIL=8 KILN_FP4_PAIR=all "$KILN" --no-store --json moe verify --weights nvfp4 --counts "$c" "${LDOWN[@]}"
  done
  fi
  if [ "$part" != verify ]; then
  gemv_ab wide xring "1 8192 8192" "4 14336 4096" "16 8192 8192" "8 8192 8192" "1 4096 4096"
  # the SwiGLU under tail 1 / 8; the down projection under tail 1 / 8 x pair swiglu / all
  for r in 1 2; do
    for v in 1 8; do
      for t in 1 4 8; do
        c=$(layer_counts $t)
        step "layer-t$t-swiglu-tail$v-$r" 60 env KILN_FP4_TAIL=$v "$KILN" --no-store moe bench --weights nvfp4 --counts "$c" "${LSW[@]}"
        for pair in swiglu all; do
          step "layer-t$t-down-tail$v-$pair-$r" 60 env KILN_FP4_TAIL=$v KILN_FP4_PAIR=$pair "$KILN" --no-store moe bench --weights nvfp4 --counts "$c" "${LDOWN[@]}"
        done
      done
    done
  done
  fi
  table
  echo
  gemv_summary gemv-xring-verify
  table_lines '^\| |checks' "$D"/verify-pair-*.err "$D"/verify-tail8-*.err "$D"/layer-t*.txt
  ;;

fp4swz)
  fp4_task_setup "${1:-all}"
  if [ "$part" != time ]; then
  # each new path verified before it is timed
  step gemv-xswz-verify 90 env KILN_FP4_GEMV=xswz "$KILN" --no-store fp4 verify --suite full
  step gemv-leanx-verify 90 env KILN_FP4_GEMV=leanx "$KILN" --no-store fp4 verify --suite full
  w4a8_verify ""
  # F11's fault, for its diagnosis (expected to fail until fixed)
  step w4a8-tma-sanitize 90 env KILN_W4A8_SX=tma ${SANITIZER:-compute-sanitizer} --tool memcheck \
    "$KILN" --no-store moe verify --weights mxfp4 --act e4m3 --counts 1,2 --n 128 --k 128
  fi
  if [ "$part" != verify ]; then
  gemv_ab xring xswz "1 8192 8192" "4 14336 4096" "2 8192 8192" "1 4096 4096"
  gemv_ab lean leanx "1 8192 8192" "1 4096 4096"
  for r in 1 2; do
    step "w4a8-prefill-$r" 120 "$KILN" --no-store moe bench --weights mxfp4 --act e4m3 \
      --experts 256 --tokens 32768 "${SW[@]}"
  done
  step w4a8-decode512 120 "$KILN" --no-store moe bench --weights mxfp4 --act e4m3 --counts "$DECODE" "${SW[@]}"
  fi
  table
  echo
  gemv_summary gemv-xswz-verify gemv-leanx-verify
  table_lines '^\| (mxfp4|bf16 swiglu)|checks' "$D"/verify-w4a8*.err "$D"/w4a8-*.txt
  ;;

fp4stage)
  fp4_task_setup "${1:-all}"
  if [ "$part" != time ]; then
  # each new path verified before it is timed
  step gemv-xstage-quick 90 env KILN_FP4_GEMV=xstage "$KILN" --no-store fp4 verify --suite quick
  step gemv-xstage-verify 90 env KILN_FP4_GEMV=xstage "$KILN" --no-store fp4 verify --suite full
  step gemv-xstage-sanitize 120 env KILN_FP4_GEMV=xstage "$SAN" --tool memcheck \
    "$KILN" --no-store fp4 verify --suite quick
  step w4a8-tma-sanitize 90 env KILN_W4A8_SX=tma "$SAN" --tool memcheck \
    "$KILN" --no-store moe verify --weights mxfp4 --act e4m3 --counts 1,2 --n 128 --k 128
  step w4a8-producer-sanitize 90 env KILN_W4A8_DECODE=producer "$SAN" --tool memcheck \
    "$KILN" --no-store moe verify --weights mxfp4 --act e4m3 --counts 129,1,0,200 --n 256 --k 512
  # each W4A8 variant: the scales by TMA, the decode on the producer's warps, both
  for v in tma producer both; do
    case $v in
      tma) env=(KILN_W4A8_SX=tma) ;;
      producer) env=(KILN_W4A8_DECODE=producer) ;;
      both) env=(KILN_W4A8_SX=tma KILN_W4A8_DECODE=producer) ;;
    esac
    w4a8_verify "-$v" "${env[@]}"
  done
  fi
  if [ "$part" != verify ]; then
  gemv_ab lean xstage "1 8192 8192" "1 4096 4096"
  gemv_ab xswz xstage "4 14336 4096" "2 8192 8192" "8 8192 8192"
  # the four W4A8 variants (scales ldg / tma x decode by consumers / producer), two rounds
  for r in 1 2; do
    for sx in ldg tma; do
      for dec in consumers producer; do
        step "w4a8-prefill-$sx-$dec-$r" 120 env KILN_W4A8_SX=$sx KILN_W4A8_DECODE=$dec "$KILN" --no-store \
          moe bench --weights mxfp4 --act e4m3 --experts 256 --tokens 32768 "${SW[@]}"
      done
    done
  done
  for sx in ldg tma; do
    for dec in consumers producer; do
      step "w4a8-decode512-$sx-$dec" 120 env KILN_W4A8_SX=$sx KILN_W4A8_DECODE=$dec "$KILN" --no-store \
        moe bench --weights mxfp4 --act e4m3 --counts "$DECODE" "${SW[@]}"
    done
  done
  fi
  table
  echo
  gemv_summary gemv-xstage-quick gemv-xstage-verify
  table_lines 'ERROR SUMMARY' "$D"/*-sanitize.txt
  table_lines '^\| (mxfp4|bf16 swiglu)|checks' "$D"/verify-w4a8*.err "$D"/w4a8-*.txt
  ;;

fp4g9)
  fp4_task_setup "${1:-all}"
  if [ "$part" != time ]; then
  # each new path verified before it is timed
  step gemv-lean1-quick 90 env KILN_FP4_GEMV=lean1 "$KILN" --no-store fp4 verify --suite quick
  step gemv-lean1-verify 90 env KILN_FP4_GEMV=lean1 "$KILN" --no-store fp4 verify --suite full
  step gemv-lean1-sanitize 120 env KILN_FP4_GEMV=lean1 "$SAN" --tool memcheck \
    "$KILN" --no-store fp4 verify --suite quick
  step w4a8-sanitize 90 "$SAN" --tool memcheck \
    "$KILN" --no-store moe verify --weights mxfp4 --act e4m3 --counts 129,1,0,200 --n 256 --k 512
  for v in tma ldg; do
    w4a8_verify "-$v" KILN_W4A8_SX=$v
  done
  fi
  if [ "$part" != verify ]; then
  gemv_ab lean lean1 "1 8192 8192" "1 4096 4096"
  for r in 1 2; do
    for sx in tma ldg; do
      w4a8_bench "$sx-$r" KILN_W4A8_SX=$sx
    done
  done
  fi
  table
  echo
  gemv_summary gemv-lean1-quick gemv-lean1-verify
  table_lines 'ERROR SUMMARY' "$D"/*-sanitize.txt
  table_lines '^\| (mxfp4|bf16 swiglu)|checks' "$D"/verify-w4a8*.err "$D"/w4a8-*.txt
  ;;

w4a8beside)
  fp4_task_setup "${1:-all}"
  BESIDE=(KILN_W4A8_PROMOTE=beside)
  IDLE=(KILN_W4A8_PROMOTE=beside KILN_W4A8_IDLE=decode)
  if [ "$part" != time ]; then
  # each new order verified before it is timed; 129 and 1 rows make tiles of at most 64 tokens
  step w4a8-beside-sanitize 90 env "${BESIDE[@]}" "$SAN" --tool memcheck \
    "$KILN" --no-store moe verify --weights mxfp4 --act e4m3 --counts 129,1,0,200 --n 256 --k 512
  step w4a8-idle-sanitize 90 env "${IDLE[@]}" "$SAN" --tool memcheck \
    "$KILN" --no-store moe verify --weights mxfp4 --act e4m3 --counts 129,1,0,200 --n 256 --k 512 --swiglu --routed
  w4a8_verify -beside "${BESIDE[@]}"
  w4a8_verify -idle "${IDLE[@]}"
  fi
  if [ "$part" != verify ]; then
  for r in 1 2; do
    for v in after beside idle; do
      case $v in
        after) env=(KILN_W4A8_PROMOTE=after) ;;
        beside) env=("${BESIDE[@]}") ;;
        idle) env=("${IDLE[@]}") ;;
      esac
      w4a8_bench "$v-$r" "${env[@]}"
    done
  done
  fi
  table
  echo
  table_lines 'ERROR SUMMARY' "$D"/*-sanitize.txt
  table_lines '^\| (mxfp4|bf16 swiglu)|checks' "$D"/verify-w4a8*.err "$D"/w4a8-*.txt
  ;;

w4a8ncu)
  need_bin "$KILN"; machine "$KILN"
  decode_counts
  NCU=${NCU:-ncu}
  NCU_ARGS=(--clock-control none --launch-skip 3 --launch-count 1 --section SpeedOfLight
    --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis
    --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section SchedulerStats
    --metrics smsp__issue_active.avg.pct_of_peak_sustained_active)
  for v in ${W4A8_NCU:-after idle}; do
    case $v in
      after) env=(KILN_W4A8_PROMOTE=after) ;;
      idle) env=(KILN_W4A8_PROMOTE=beside KILN_W4A8_IDLE=decode) ;;
    esac
    step "ncu-w4a8-$v" 240 env "${env[@]}" "$NCU" "${NCU_ARGS[@]}" -k regex:moe_fp4_experts_w4a8 \
      "$KILN" --no-store moe bench --weights mxfp4 --act e4m3 --experts 256 --tokens 32768 "${SW[@]}"
  done
  table
  echo
  for f in "$D"/ncu-*.txt; do
    echo "== $(basename "$f" .txt)"
    grep -E 'Duration|L1/TEX|Shared|Bank|Tensor|Issue Slots Busy|smsp__issue_active|Stall|Warp Cycles Per Issued' "$f" | head -40
  done | tee "$D/summary.txt"
  ;;

fp4ncu)
  need_bin "$KILN"; machine "$KILN"
  decode_counts
  NCU=${NCU:-ncu}
  NCU_ARGS=(--clock-control none --launch-skip 5 --launch-count 1 --section SpeedOfLight
    --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis
    --section Occupancy --section LaunchStats
    --metrics dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active)
  for g in ${NCU_GEMV:-regs wide lean}; do
    step "ncu-gemv-$g" 180 env KILN_FP4_GEMV=$g "$NCU" "${NCU_ARGS[@]}" -k regex:nvfp4_gemv \
      "$KILN" --no-store fp4 bench --gemv --m 1 --n 8192 --k 8192 --no-vendor --reps 10
  done
  step ncu-decode512 240 "$NCU" "${NCU_ARGS[@]}" -k regex:moe_fp4_experts \
    "$KILN" --no-store moe bench --weights nvfp4 --counts "$DECODE" "${SW[@]}"
  table
  echo
  for f in "$D"/ncu-*.txt; do
    echo "== $(basename "$f" .txt)"
    grep -E 'Duration|DRAM Throughput|dram__|Issue Slots Busy|smsp__issue_active|Achieved Occupancy|Stall|Registers Per|Warp Cycles Per Issued' "$f" | head -30
  done | tee "$D/summary.txt"
  ;;

fp4pack)
  fp4_task_setup "${1:-all}"
  if [ "$part" != time ]; then
  # the path verified before it is timed
  step gemv-pack-quick 60 env KILN_FP4_GEMV=pack "$KILN" --no-store fp4 verify --suite quick
  step gemv-pack-verify 60 env KILN_FP4_GEMV=pack "$KILN" --no-store fp4 verify --suite full
  step gemv-pack-sanitize 120 env KILN_FP4_GEMV=pack "$SAN" --tool memcheck \
    "$KILN" --no-store fp4 verify --suite quick
  fi
  if [ "$part" != verify ]; then
  gemv_ab auto pack "1 8192 8192" "4 8192 8192" "1 14336 4096" "4 14336 4096"
  fi
  table
  echo
  gemv_summary gemv-pack-quick gemv-pack-verify
  table_lines 'ERROR SUMMARY' "$D"/*-sanitize.txt
  ;;

anyopncu)
  need_bin "$KILN"; machine "$KILN"
  NCU=${NCU:-ncu}
  NCU_ARGS=(--clock-control none --launch-skip 3 --launch-count 1 --section SpeedOfLight
    --section WarpStateStats --section MemoryWorkloadAnalysis
    --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_op_write.sum,lts__t_requests_op_write.sum,lts__t_sectors_op_read.sum)
  S=(--shape 9664x16127x17 --layout RC --dtype f16 --reps 3 --warmup 3)
  step ncu-smallk 120 "$NCU" "${NCU_ARGS[@]}" -k regex:gemm_small_k "$KILN" --no-store bench "${S[@]}"
  step ncu-smallk-vec 120 env KILN_WGMMA_SMALLK_VEC=1 "$NCU" "${NCU_ARGS[@]}" -k regex:gemm_small_k \
    "$KILN" --no-store bench "${S[@]}"
  step ncu-rowstore 120 env KILN_WGMMA_SMALLK=0 "$NCU" "${NCU_ARGS[@]}" -k regex:gemm_wgmma_tma_ws \
    "$KILN" --no-store bench "${S[@]}"
  step ncu-cublas 120 "$NCU" "${NCU_ARGS[@]}" -k regex:'nvjet|xmma|cutlass|sm90_' \
    "$KILN" --no-store bench "${S[@]}"
  table
  echo
  for f in "$D"/ncu-*.txt; do
    echo "== $(basename "$f" .txt)"
    grep -E 'Duration|DRAM Throughput|dram__bytes|lts__t_|L2 Cache Throughput|Memory Throughput|Stall' "$f" | head -20
  done | tee "$D/summary.txt"
  ;;

moelayer)
  need_bin "$KILN"; machine "$KILN"
  step moe-check 300 "$KILN" --no-store moe check
  step_json layer-verify 580 "$KILN" --no-store --json moe verify --layer --suite "${LAYER_SUITE:-full}"
  step layer-fuzz 400 "$KILN" --no-store fuzz --seed "${1:-1}" --gemm 0 --attention 0 --moe 0 --fp8 0 \
    --moe-layer "${FUZZ_LAYER:-100}" --out "$D/fuzz.json" --failures "$D/failures.jsonl"
  step_json layer-bench 400 "$KILN" --no-store --json moe bench --layer
  step_json layer-bench-ordered 300 "$KILN" --no-store --json moe bench --layer E64,k8,H2048,I1408,T1+64+4096 --combine ordered
  # the other gather (16-byte cp.async chunks instead of 1-row TMA boxes): checked, then timed
  step_json layer-verify-cp-async 300 env KILN_MOE_GATHER=cp_async "$KILN" --no-store --json moe verify --layer --suite quick
  step_json layer-bench-cp-async 300 env KILN_MOE_GATHER=cp_async "$KILN" --no-store --json moe bench --layer E64,k8,H2048,I1408,T1+64+4096
  # Kiln::moe_layer from Rust (cargo build --release --examples; KILN_EXAMPLE_DIR to carry it)
  ex=${KILN_EXAMPLE_DIR:-$(dirname "$KILN")/examples}/moe_layer
  [ -x "$ex" ] && step example-moe-layer 120 "$ex"
  wheel=${KILN_WHEEL:-$(ls "$ROOT"/target/wheels/kiln-*.whl 2>/dev/null | head -n 1)}
  if [ -n "$wheel" ]; then
    site=${TMPDIR:-/tmp}/kiln-python-site
    rm -rf "$site"
    "$PY" -m pip install --quiet --no-deps --no-index --target "$site" "$wheel" || status=1
    OUT=$D PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" step python-moe 560 "$PY" python/tests/gpu_check.py --moe
  else
    echo "no wheel (bash scripts/python.sh, or KILN_WHEEL): the Python step is skipped" >&2; status=1
  fi
  table
  echo
  "$PY" - "$D" <<'EOF' | tee "$D/summary.txt" || status=1
import json, os, sys
d = sys.argv[1]
def load(p):
    try:
        return json.load(open(os.path.join(d, p)))
    except Exception as e:
        return {"error": f"no result ({e})"}
v = load("layer-verify.json")
if isinstance(v, list):
    bad = [x for x in v if not x["passed"]]
    worst = max((x["rel_error"] / x["bound"] for x in v if x["rel_error"] == x["rel_error"]), default=float("nan"))
    print(f"layer verify: {len(v)} checks, {len(bad)} failed, worst error {worst:.2f} of its bound")
    for x in bad[:5]:
        print(f"  FAIL {x['problem']}: {x['message']}")
else:
    print(f"layer verify: {v.get('error')}")
c = load("layer-verify-cp-async.json")
if isinstance(c, list):
    print(f"layer verify, cp.async gather: {len(c)} checks, {sum(1 for x in c if not x['passed'])} failed")
for name in ("layer-bench", "layer-bench-ordered", "layer-bench-cp-async"):
    for r in load(name + ".json").get("rows") or []:
        print(f"{name:20} {r['problem'][:62]:62} {r['piece']:13} {r['median_ms'] * 1e3:9.1f} us {r['tflops']:7.1f} TF")
py = load("python-gpu-check.json")
for t in py.get("timings", []):
    if not t["what"].startswith("experts"):
        continue
    tokens = t["what"].split(" T")[1].split(" ")[0]
    target = 1.8 if tokens == "4096" else 1.5
    sp = t["speedup"]
    verdict = "" if sp != sp else ("met" if sp >= target else "MISSED")
    print(f"{t['what']:66} kiln {t['kiln_ms'] * 1e3:8.1f} us  torch {t['torch_ms'] * 1e3:8.1f} us  {sp:5.2f}x  >= {target}x {verdict}")
fails = [c for c in py.get("checks", []) if not c["ok"]]
print(f"python --moe: {len(py.get('checks', []))} checks, {len(fails)} failed")
for c in fails[:8]:
    print(f"  FAIL {c['kind']} {c['name']}: {str({k: v for k, v in c.items() if k not in ('kind', 'name', 'ok')})[:200]}")
EOF
  ;;

sanitize)
  need_bin "$KILN"; machine "$KILN"
  step sanitize-versions 290 "$KILN" --no-store sanitize --jobs "${JOBS:-8}" --timeout 120
  step sanitize-configs 290 "$KILN" --no-store sanitize --configs --jobs "${JOBS:-8}" --timeout 120
  table
  echo; grep -hE "errors|FAILED|TIMED OUT|NOT COVERED" "$D"/sanitize-*.txt | head -20 ;;

anyop)
  need_bin "$KILN"; machine "$KILN"
  part=${1:-all}  # verify, time or all
  # Issue 48's table: M N K layout dtype
  shapes=("9049 8833 8 RR f16" "4327 876 178 RR bf16" "13690 1457 36 RC f16" "9664 16127 17 RC bf16"
          "7103 5 15091 CR bf16" "129 127 4095 RR bf16" "281 8320 8512 RC bf16")
  # the dispatch before issue 48's rules, as env settings (the same binary)
  old=(${ANYOP_OLD:-KILN_WGMMA_INPLACE=0 KILN_WGMMA_SWAP=0 KILN_WGMMA_LONGK=0 KILN_WGMMA_SMALLK=0})
  if [ "$part" != time ]; then
    step anyop-verify-quick 90 "$KILN" --no-store verify --version wgmma_tma_ws --suite quick
    for v in KILN_WGMMA_INPLACE=1 KILN_WGMMA_SWAP=1 KILN_WGMMA_CFG=n144 KILN_WGMMA_SMALLK=1; do
      n=${v#KILN_WGMMA_}; n=${n//=/-}
      step "anyop-verify-quick-${n,,}" 90 env "$v" "$KILN" --no-store verify \
        --version wgmma_tma_ws --suite quick
    done
    for s in "${shapes[@]}"; do
      read -r m n k l d <<< "$s"
      step "anyop-verify-${m}x${n}x${k}" 60 "$KILN" --no-store verify --version wgmma_tma_ws \
        --shape "${m}x${n}x${k}" --layout "$l" --dtype "$d"
    done
    for v in KILN_WGMMA_INPLACE=auto KILN_WGMMA_INPLACE=1 KILN_WGMMA_SWAP=1 KILN_WGMMA_SMALLK=1; do
      n=${v#KILN_WGMMA_}; n=${n//=/-}
      step "anyop-fuzz-${n,,}" 150 env "$v" "$KILN" --no-store fuzz --seed 1 \
        --gemm "${ANYOP_FUZZ:-1500}" --attention 0 --moe 0 --fp8 0 --moe-layer 0 --version wgmma_tma_ws
    done
  fi
  if [ "$part" != verify ]; then
    for s in "${shapes[@]}"; do
      read -r m n k l d <<< "$s"
      step "anyop-bench-old-${m}x${n}x${k}" 60 env "${old[@]}" "$KILN" bench \
        --shape "${m}x${n}x${k}" --layout "$l" --dtype "$d"
      step "anyop-bench-new-${m}x${n}x${k}" 60 "$KILN" bench \
        --shape "${m}x${n}x${k}" --layout "$l" --dtype "$d"
    done
    for seed in 1 2; do
      step "anyop-random-old-s$seed" 150 env "${old[@]}" "$KILN" bench --set random --count 300 --seed "$seed"
      step "anyop-random-new-s$seed" 150 "$KILN" bench --set random --count 300 --seed "$seed"
    done
  fi
  table
  for f in "$D"/anyop-bench-*.txt "$D"/anyop-random-*.txt; do
    [ -f "$f" ] || continue
    echo; echo "== $(basename "$f" .txt)"; grep -v '^\s*$' "$f" | tail -4
  done ;;

ws-check)
  need_bin "$KILN"; machine "$KILN"
  step verify-wgmma_tma_ws-full 200 "$KILN" --no-store verify --version wgmma_tma_ws --suite full
  step moe-verify-quick 100 "$KILN" --no-store moe verify --suite quick
  step sanitize-configs 280 "$KILN" --no-store sanitize --configs --jobs "${JOBS:-8}" --timeout 120
  table
  echo; grep -hE "errors|FAILED|TIMED OUT|NOT COVERED" "$D/sanitize-configs.txt" | head -20 ;;

peak)
  need_bin "$KILN"; machine "$KILN"
  step peak 300 "$KILN" peak
  table
  echo; cat "$D/peak.txt" ;;

check)
  need_bin "$KILN"; machine "$KILN"
  step_json check 580 "$KILN" --json --no-store check
  table
  echo
  "$PY" - "$D/check.json" "$D/hashes.tsv" <<'EOF' || status=1
import json, statistics, sys
data = json.load(open(sys.argv[1]))
rows = data if isinstance(data, list) else data.get("rows", [])
with open(sys.argv[2], "w") as f:
    for r in rows:
        f.write(f"{r['op']}\t{r['version']}\t{r['variant']}\t{r['cubin_sha256']}\n")
bad = [r for r in rows if r.get("problems")]
cpu = [r["compile_cpu_ms"] for r in rows if r.get("compile_cpu_ms") and not r.get("cached")]
print(f"{len(rows)} variants, {len({r['cubin_sha256'] for r in rows})} distinct CUBINs, {len(bad)} with problems"
      + (f", cold CPU median {statistics.median(cpu):.0f} ms" if cpu else ""))
for r in bad[:20]:
    print(f"  {r['version']} {r['variant']}: {'; '.join(r['problems'])}")
EOF
  ;;

ab)
  [ $# -eq 2 ] || { echo "usage: bash scripts/gpu.sh ab OLD_BIN NEW_BIN" >&2; exit 2; }
  OLD=$(abspath "$1"); NEW=$(abspath "$2")
  need_bin "$OLD" "$NEW"; machine "$OLD" "$NEW"
  # 1. CUBIN hashes of every variant, each binary with its own empty JIT cache.
  for lab in old new; do
    bin=$OLD; [ $lab = new ] && bin=$NEW
    cache=${TMPDIR:-/tmp}/kiln-ab-cache-$lab; rm -rf "$cache"
    KILN_CACHE_DIR=$cache step_json "check-$lab" 580 "$bin" --json --no-store check
  done
  "$PY" - "$D/check-old.json" "$D/check-new.json" > "$D/hash-diff.txt" <<'EOF' || status=1
import json, sys
def rows(p):
    d = json.load(open(p))
    return {(r["op"], r["version"], r["variant"]): r["cubin_sha256"] for r in (d if isinstance(d, list) else d.get("rows", []))}
a, b = rows(sys.argv[1]), rows(sys.argv[2])
same = [k for k in a if k in b and a[k] == b[k]]
diff = [k for k in a if k in b and a[k] != b[k]]
print(f"CUBINs: {len(same)} identical, {len(diff)} differ, {len(set(a) - set(b))} only old, {len(set(b) - set(a))} only new")
for tag, ks in (("differs", diff), ("only old", sorted(set(a) - set(b))), ("only new", sorted(set(b) - set(a)))):
    for k in ks:
        print(f"  {tag}: {' '.join(k)}")
EOF
  # 2. Both verified.
  for lab in old new; do
    bin=$OLD; [ $lab = new ] && bin=$NEW
    step "gemm-verify-$lab" 580 "$bin" --no-store verify --suite "${AB_SUITE:-full}"
    step "attn-verify-$lab" 580 "$bin" --no-store attn verify --suite "${AB_SUITE:-full}"
    step "moe-verify-$lab" 580 "$bin" --no-store moe verify --suite "${AB_SUITE:-full}"
  done
  # 3. The targets set of both in one run, rotated old new new old ...
  order=(old new new old old new new old)
  for i in $(seq 0 $(( ${AB_ROUNDS:-4} - 1 ))); do
    lab=${order[$((i % 8))]}; bin=$OLD; [ $lab = new ] && bin=$NEW
    step_json "targets-$i-$lab" 580 "$bin" --json --no-store bench --set targets --layouts "${LAYOUTS:-RC,CR,RR,CC}"
  done
  "$PY" - "$D" > "$D/ab-summary.txt" <<'EOF' || status=1
import glob, json, math, os, re, statistics, sys
d = sys.argv[1]
paired = {"old": {}, "new": {}}
with open(os.path.join(d, "ab.jsonl"), "w") as out:
    for p in sorted(glob.glob(os.path.join(d, "targets-*.json")), key=lambda p: int(re.search(r"targets-(\d+)-", p).group(1))):
        lab = re.search(r"targets-\d+-(\w+)\.json", p).group(1)
        try:
            rows = json.load(open(p))
        except ValueError:
            continue
        for r in rows:
            if not r.get("versions") or r.get("vendor") is None:
                continue
            q = r["problem"]
            shape = f"{q['m']}x{q['n']}x{q['k']} {q['layout']}"
            out.write(json.dumps({"cfg": lab, "shape": shape}) + "\n" + json.dumps(r) + "\n")
            paired[lab].setdefault(shape, []).append(r["vendor"]["median_ms"] / r["versions"][0][0]["median_ms"])
for lab, by in paired.items():
    med = [statistics.median(v) for v in by.values()]
    if med:
        print(f"{lab}: {len(med)} problems, paired ratio to cuBLAS geomean {math.exp(sum(map(math.log, med)) / len(med)):.3f}, lowest {min(med):.3f}")
both = [s for s in paired["old"] if s in paired["new"]]
moved = [(statistics.median(paired["new"][s]) / statistics.median(paired["old"][s]), s) for s in both]
print(f"new / old over {len(moved)} problems: {sum(1 for m, _ in moved if m > 1.02)} faster by > 2 %, {sum(1 for m, _ in moved if m < 0.98)} slower by > 2 %")
print("the five lowest new / old:")
for m, s in sorted(moved)[:5]:
    print(f"  {s}: {m:.3f}")
EOF
  [ -s "$D/ab.jsonl" ] && "$PY" scripts/ab-table.py "$D/ab.jsonl" > "$D/ab-table.txt" 2>&1
  table
  echo; head -12 "$D/hash-diff.txt"; cat "$D/ab-summary.txt"
  ;;

landscape)
  [ $# -ge 1 ] || { echo "usage: bash scripts/gpu.sh landscape MxNxK..." >&2; exit 2; }
  need_bin "$KILN"; machine "$KILN"
  for s in "$@"; do
    step "tune-$s" 290 "$KILN" tune --version wgmma_tma_ws --shape "$s" --search exhaustive --landscape "$D/ws-$s.json"
  done
  table
  echo; grep -HE "^best" "$D"/tune-*.txt ;;

python)
  # The wheel built here (scripts/python.sh, or KILN_WHEEL), installed into a scratch folder
  # beside torch: the CPU tests, then python/tests/gpu_check.py (per-op checks against torch,
  # opcheck, torch.compile, CUDA graphs, two small transformers models, timings; JSON in $D).
  use_wheel
  step unit 120 "$PY" -m unittest discover -s python/tests -p 'test_*.py'
  OUT=$D step gpu_check 560 "$PY" python/tests/gpu_check.py ${PYTHON_QUICK:+--quick} ${PYTHON_ONLY:+--only "$PYTHON_ONLY"}
  table
  echo; tail -30 "$D/gpu_check.txt" 2>/dev/null ;;

suite)
  need_bin "$KILN"; machine "$KILN"
  step suite 580 "$KILN" suite --verify "${SUITE:-full}" --save "$D/suite.json"
  table
  echo; tail -40 "$D/suite.txt" ;;

fuzz)
  # `kiln fuzz` with SEED (default 1) and the counts FUZZ_GEMM, FUZZ_ATTN, FUZZ_MOE (default the
  # issue's 10,000 / 2,000 / 1,000): summary in fuzz.json, failures (if any) in failures.jsonl.
  need_bin "$KILN"; machine "$KILN"
  step fuzz 590 "$KILN" fuzz --seed "${1:-1}" --gemm "${FUZZ_GEMM:-10000}" \
    --attention "${FUZZ_ATTN:-2000}" --moe "${FUZZ_MOE:-1000}" \
    --out "$D/fuzz.json" --failures "$D/failures.jsonl"
  table
  echo; grep -v '^\s*$' "$D/fuzz.txt" | grep -v '^WRONG' | tail -22; grep -c '^WRONG' "$D/fuzz.txt" ;;

multi)
  need_bin "$KILN"; machine "$KILN"
  # NVLink multicast off in NCCL, torch's symmetric memory and NVSHMEM, for every child.
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  echo "GPUs: $ngpu" >> "$D/machine.txt"
  # (a) Two handles (one per GPU) in one process, each on its own thread.
  ex=${KILN_EXAMPLE_BIN:-$ROOT/target/release/examples/two_gpus}
  if [ -x "$ex" ]; then
    step two_gpus 120 "$ex" "${TWO_GPUS_ITERS:-5}"
  else
    echo "no example binary at $ex: cargo build --release --examples (or set KILN_EXAMPLE_BIN)" > "$D/two_gpus.txt"
    ROWS+=("$(printf '%-26s %4s %6s  %s' two_gpus - 0 "missing: $ex")"); status=1
  fi
  # (b) The torch.distributed layers on 1, 2 and all GPUs, from the wheel (as the python task).
  wheel=${KILN_WHEEL:-$(ls "$ROOT"/target/wheels/kiln-*.whl 2>/dev/null | head -n 1)}
  if [ -n "$wheel" ]; then
    site=${TMPDIR:-/tmp}/kiln-python-site
    rm -rf "$site"
    "$PY" -m pip install --quiet --no-deps --no-index --target "$site" "$wheel" || status=1
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
    for w in $(printf '%s\n' 1 2 "$ngpu" | sort -nu); do
      [ "$w" -le "$ngpu" ] || continue
      step "torchrun-w$w" "${TORCHRUN_LIMIT:-150}" "$PY" -m torch.distributed.run --standalone --nproc_per_node="$w" \
        python/tests/distributed_check.py --out "$D"
    done
  else
    echo "no wheel: build one with bash scripts/python.sh (or set KILN_WHEEL)" > "$D/torchrun.txt"
    ROWS+=("$(printf '%-26s %4s %6s  %s' torchrun - 0 "no wheel")"); status=1
  fi
  # (c) One space three times: GPU 0 with a cold JIT cache (it compiles every candidate, warming
  # the cache), all GPUs, GPU 0 again: the last two differ only in the workers that time.
  read -r -a spec <<< "${MULTI_TUNE:---version wgmma_tma_ws --shape 4096x4096x4096 --search exhaustive --budget 12}"
  cache=${TMPDIR:-/tmp}/kiln-multi-cache; rm -rf "$cache"
  KILN_CACHE_DIR=$cache step_json tune-gpu0-cold "${TUNE_LIMIT:-150}" "$KILN" --json --no-store tune "${spec[@]}" --gpus 0
  KILN_CACHE_DIR=$cache step_json tune-all "${TUNE_LIMIT:-150}" "$KILN" --json --no-store tune "${spec[@]}" --gpus all
  KILN_CACHE_DIR=$cache step_json tune-gpu0 "${TUNE_LIMIT:-150}" "$KILN" --json --no-store tune "${spec[@]}" --gpus 0
  # --gpus naming a GPU that does not exist: one sentence and exit 2 (the row's code is 0 when so).
  t0=$SECONDS
  timeout 60 "$KILN" --no-store tune "${spec[@]}" --gpus "0,$ngpu" > "$D/tune-missing-gpu.txt" 2>&1
  rc=$?; bad=1
  [ $rc -eq 2 ] && grep -q "names GPU $ngpu" "$D/tune-missing-gpu.txt" && bad=0
  [ $bad -ne 0 ] && status=1
  ROWS+=("$(printf '%-26s %4s %6s  %s' tune-missing-gpu $bad "$((SECONDS - t0))" "exit $rc (want 2): $(tail -1 "$D/tune-missing-gpu.txt" | cut -c1-80)")")
  table
  echo
  "$PY" scripts/multi-table.py "$D" "$ngpu" | tee "$D/summary.txt" || status=1
  ;;

varlen)
  need_bin "$KILN"; machine "$KILN"
  step varlen-suite 580 "$KILN" attn verify --varlen-suite
  step varlen-seeded 300 "$KILN" attn verify --varlen-count 16 --varlen-range 1:3000 --seed 7 --heads 8 --kv-heads 2 --causal
  step varlen-window 300 "$KILN" attn verify --varlen 1,63,64,65,127,4097,100:300 --window 256,0 --heads 4 --dim 64
  step dense-window 300 "$KILN" attn verify --version fa3_wgmma --batch 2 --heads 4 --seqlen 1000 --window 128,16 --dim 256
  step dense-window-causal 300 "$KILN" attn verify --version fa3_wgmma --batch 1 --heads 2 --kv-heads 1 --seqlen-q 700 --seqlen-kv 1500 --window 300,-1 --causal --layout BHSD
  for d in 128 64 256; do for c in "" --causal; do
    step "varlen-bench-d$d${c:+-causal}" 300 "$KILN" attn bench --varlen-count 32 --varlen-range 128:8192 --seed 1 --heads 16 --dim $d $c
  done; done
  table
  echo
  for f in "$D"/varlen-bench-*.txt; do echo "== $(basename "$f" .txt)"; tail -6 "$f"; done | tee "$D/summary.txt"
  ;;

varlen-ab)
  [ $# -eq 2 ] || { echo "usage: bash scripts/gpu.sh varlen-ab OLD_BIN NEW_BIN" >&2; exit 2; }
  OLD=$(abspath "$1"); NEW=$(abspath "$2")
  need_bin "$OLD" "$NEW"; machine "$OLD" "$NEW"
  step varlen-suite-new 580 "$NEW" --no-store attn verify --varlen-suite
  step varlen-seeded-new 300 "$NEW" --no-store attn verify --varlen-count 16 --varlen-range 1:3000 --seed 7 --heads 8 --kv-heads 2 --causal
  for d in ${VARLEN_DIMS:-128 64 256}; do for c in "" --causal; do
    for lab in old new new old; do
      bin=$OLD; [ $lab = new ] && bin=$NEW
      n=0; while [ -e "$D/d$d${c:+-causal}-$lab-$n.json" ]; do n=$((n + 1)); done
      step_json "d$d${c:+-causal}-$lab-$n" 300 "$bin" --json --no-store attn bench --varlen-count 32 --varlen-range 128:8192 --seed 1 --heads 16 --dim $d $c
    done
  done; done
  table
  echo
  "$PY" - "$D" <<'PYEOF' | tee "$D/summary.txt" || status=1
import glob, json, os, re, sys
d = sys.argv[1]
runs = {}
for f in sorted(glob.glob(f"{d}/d*-*-[0-9].json")):
    m = re.match(r"(d\d+(?:-causal)?)-(old|new)-\d+\.json", os.path.basename(f))
    try:
        r = json.load(open(f))
    except Exception as e:
        print(f"{os.path.basename(f)}: {e}"); continue
    runs.setdefault(m.group(1), {}).setdefault(m.group(2), []).append(r)
print(f"{'problem':14} {'old ms':>9} {'new ms':>9} {'new/old':>8} {'old vs dense':>13} {'new vs dense':>13} {'new vs equal':>13}")
for k, v in runs.items():
    ms = {lab: sorted(r["median_ms"] for r in v.get(lab, [])) for lab in ("old", "new")}
    vs = {lab: [r["vs_dense"] for r in v.get(lab, [])] for lab in ("old", "new")}
    eq = [r["vs_equal_lengths"] for r in v.get("new", []) if "vs_equal_lengths" in r]
    if not ms["old"] or not ms["new"]:
        print(f"{k}: a binary has no run"); continue
    o, n = ms["old"][0], ms["new"][0]
    f = lambda xs: f"{min(xs):.3f}-{max(xs):.3f}" if xs else "-"
    print(f"{k:14} {o:9.3f} {n:9.3f} {o / n:8.3f}x {f(vs['old']):>13} {f(vs['new']):>13} {f(eq):>13}")
print("ms: the best median of each binary's runs; new/old > 1: the new binary is faster. Target: packed >= 0.90x dense")
PYEOF
  ;;

fp8moe)
  need_bin "$KILN"; machine "$KILN"
  step fp8-check 300 "$KILN" fp8 check
  step fp8moe-verify 580 "$KILN" fp8 verify --grouped --suite "${FP8MOE_SUITE:-full}"
  g=(--groups 4 --n 4096 --k 7168)
  step_json bench-contiguous 300 "$KILN" --json fp8 bench --grouped "${g[@]}" --rows 8192
  step_json bench-masked 300 "$KILN" --json fp8 bench --grouped --masked "${g[@]}" --rows 256
  step_json bench-swiglu 300 "$KILN" --json fp8 bench --grouped --swiglu --routed "${g[@]}" --rows 8192
  step_json bench-swiglu-q 300 "$KILN" --json fp8 bench --grouped --swiglu --routed --quantize "${g[@]}" --rows 8192
  # every feed of the grouped GEMM (KILN_FP8_GROUPED, docs/fp8.md ledger row 22): verified, then
  # timed as the default is; FP8MOE_FEEDS="" skips them
  feeds=${FP8MOE_FEEDS-ldg t tm tm256}
  for f in $feeds; do
    step "fp8moe-verify-$f" 120 env KILN_FP8_GROUPED="$f" "$KILN" fp8 verify --grouped --suite quick
    step "fp8moe-ragged-$f" 120 env KILN_FP8_GROUPED="$f" "$KILN" fp8 verify --grouped --counts 257,1,255,0,513 --n 200 --k 1040
    step_json "bench-contiguous-$f" 300 env KILN_FP8_GROUPED="$f" "$KILN" --json fp8 bench --grouped "${g[@]}" --rows 8192
    step_json "bench-masked-$f" 300 env KILN_FP8_GROUPED="$f" "$KILN" --json fp8 bench --grouped --masked "${g[@]}" --rows 256
  done
  step_json peer-contiguous 300 "$PY" scripts/peers.py fp8moe --counts 8192,8192,8192,8192 --n 4096 --k 7168
  step_json peer-masked 300 "$PY" scripts/peers.py fp8moe --counts 256,256,256,256 --n 4096 --k 7168 --masked
  table
  echo
  "$PY" - "$D" $feeds <<'PYEOF' | tee "$D/summary.txt" || status=1
import json, sys
d = sys.argv[1]
feeds = sys.argv[2:]
def kiln(name):
    try:
        return json.load(open(f"{d}/{name}.json"))["timings"][0]
    except Exception as e:
        return {"error": str(e)}
def peers(name):
    try:
        return [json.loads(l) for l in open(f"{d}/{name}.json") if l.strip()]
    except Exception as e:
        return []
print(f"{'problem':58} {'kiln ms':>9} {'TFLOPS':>7} {'TB/s':>6} {'best torch (same work)':>28} {'x torch':>8}")
for k, p in (("bench-contiguous", "peer-contiguous"), ("bench-masked", "peer-masked"),
             ("bench-swiglu", None), ("bench-swiglu-q", None)):
    t = kiln(k)
    if "error" in t:
        print(f"{k}: {t['error']}"); continue
    best = None
    for r in peers(p) if p else []:
        if r.get("same_work") and "median_ms" in r and (best is None or r["median_ms"] < best["median_ms"]):
            best = r
    peer = f"{best['path']} {best['median_ms']:.4f} ms" if best else "-"
    ratio = f"{best['median_ms'] / t['median_ms']:.3f}" if best else "-"
    print(f"{t['problem'][:58]:58} {t['median_ms']:9.4f} {t['tflops']:7.0f} {t['tbps']:6.2f} {peer:>28} {ratio:>8}"
          f"   (copy ceiling {t['copy_tbps']:.2f} TB/s)")
    for r in peers(p) if p else []:
        what = f"{r['median_ms']:.4f} ms, {r['tflops']:.0f} TFLOPS" if "median_ms" in r else r.get("error", "?")
        print(f"    torch {r['path']:16} same work: {str(r['same_work']):5} {what}")
for f in feeds:
    for k in ("bench-contiguous", "bench-masked"):
        t = kiln(f"{k}-{f}")
        if "error" in t:
            print(f"{k} KILN_FP8_GROUPED={f}: {t['error']}"); continue
        print(f"{t['problem'][:58]:58} {t['median_ms']:9.4f} {t['tflops']:7.0f} {t['tbps']:6.2f}   KILN_FP8_GROUPED={f}")
print("targets: contiguous >= 1300 TFLOPS and >= 1.3x the best same-work torch path; masked: TB/s reported")
PYEOF
  ;;

fp4)
  need_bin "$KILN"; machine "$KILN"
  step fp4-verify 580 "$KILN" fp4 verify --suite "${FP4_SUITE:-full}"
  step fp4-gemv-m1 300 "$KILN" fp4 bench --gemv --m 1 --n 8192 --k 8192
  step fp4-gemv-m16 300 "$KILN" fp4 bench --gemv --m 16 --n 8192 --k 8192
  step fp4-gemv-n2048 300 "$KILN" fp4 bench --gemv --m 1 --n 2048 --k 8192
  step fp4-seeds 580 "$KILN" fp4 seeds
  echo; grep -E '(^\| (quantize|dequantize|refuse|gemv) .*(mismatches, first|could not run|over 1e|not written|CPU: ))|checks on' "$D/fp4-verify.txt"
  echo; grep -hE '^\| (nvfp4_gemv|cublas)' "$D"/fp4-gemv-*.txt
  echo; grep -E '^\| (gemv|gemm|dual|group) |^(gemv|gemm|dual|group|geomean)' "$D/fp4-seeds.txt"
  table ;;

inplace)
  parts=("$@"); [ ${#parts[@]} -eq 0 ] && parts=(kiln python)
  for part in "${parts[@]}"; do
    case $part in
      kiln)
        need_bin "$KILN"; machine "$KILN"
        step strided-verify 300 "$KILN" attn verify --strided
        step decode-verify 420 "$KILN" attn verify --decode
        # name batch context flags: the same cache bytes paged and dense (BHSD memory, no lengths)
        while read -r name b ctx flags; do
          step_json "bench-$name" 120 "$KILN" --json attn bench --decode --batch "$b" --heads 32 --kv-heads 8 \
            --dim 128 --context "$ctx" $flags --reps 30
        done <<'SHAPES'
paged-b64 64 8192 --page-size=16
dense-b64 64 8192 --dense
paged-b1-32k 1 32768 --page-size=256
dense-b1-32k 1 32768 --dense
SHAPES
        for f in "$D"/bench-*.json; do
          "$PY" -c 'import json,sys; t=json.load(open(sys.argv[1]))["timing"]; print(sys.argv[1].rsplit("/",1)[1], t["splits"], round(t["median_us"],1), round(t["gbps"]))' "$f" 2>/dev/null
        done | tee "$D/bench-summary.txt" ;;
      python)
        use_wheel
        OUT=$D step inplace-check 560 "$PY" python/tests/inplace_check.py ;;
      *) echo "unknown part \`$part\` for inplace: use kiln or python" >&2; exit 2 ;;
    esac
  done
  table
  echo; tail -25 "$D/inplace-check.txt" 2>/dev/null ;;

attn-host)
  need_bin "$KILN"; machine "$KILN"
  step varlen-verify 130 "$KILN" attn verify --varlen-suite
  step decode-verify 150 "$KILN" attn verify --decode
  use_wheel
  OUT=$D step host-path-check 190 "$PY" python/tests/host_path_check.py
  step bench-calls 60 "$PY" -m kiln.bench_calls --calls 1000 \
    --ops flash_attn_func,flash_attn_varlen_func,flash_attn_with_kvcache --json "$D/bench-calls.json"
  call_cost_step
  table
  echo; tail -22 "$D/host-path-check.txt" 2>/dev/null; echo; tail -8 "$D/bench-calls.txt" 2>/dev/null
  echo; tail -12 "$D/call-cost.txt" 2>/dev/null ;;

moe-host)
  need_bin "$KILN"; machine "$KILN"
  step layer-verify 90 "$KILN" --no-store moe verify --layer --suite quick
  step layer-verify-cp-async 90 env KILN_MOE_GATHER=cp_async "$KILN" --no-store moe verify --layer --suite quick
  step layer-bench 120 "$KILN" --no-store moe bench --layer E128,k8,H2048,I768,T1+64+4096
  step layer-bench-cp-async 120 env KILN_MOE_GATHER=cp_async "$KILN" --no-store moe bench --layer E128,k8,H2048,I768,T1+64+4096
  use_wheel
  step bench-calls 90 "$PY" -m kiln.bench_calls --calls 1000 \
    --ops gemm,moe.grouped_gemm,moe.swiglu,moe.experts,moe.layer --json "$D/bench-calls.json"
  call_cost_step
  table
  for f in layer-bench layer-bench-cp-async; do echo; echo "== $f"; tail -12 "$D/$f.txt" 2>/dev/null; done
  echo; tail -9 "$D/bench-calls.txt" 2>/dev/null; echo; tail -12 "$D/call-cost.txt" 2>/dev/null ;;

decode)
  need_bin "$KILN"; machine "$KILN"
  step decode-check 300 "$KILN" --no-store check --arch sm_90a --version decode_paged
  step decode-verify-suite 400 "$KILN" attn verify --decode
  # The issue's problem, every row against the float64 reference (8 GB of f64 on the host).
  step decode-verify-target 400 "$KILN" attn verify --decode --batch 64 --heads 32 --kv-heads 8 \
    --dim 128 --page-size 16 --context 8192
  # name batch heads kv_heads context dim page_size seqlen_q
  DECODE_SHAPES="target 64 32 8 8192 128 16 1
page64 64 32 8 8192 128 64 1
page256 64 32 8 8192 128 256 1
one_seq_32k 1 32 8 32768 128 16 1
b8_q4_causal 8 32 8 8192 128 16 4
d64 64 32 8 8192 64 16 1
d256 32 32 8 8192 256 16 1"
  peer_shapes=""
  while read -r name b h hkv ctx d ps sq; do
    causal=; [ "$sq" -gt 1 ] && causal=--causal
    step_json "kiln-$name" 120 "$KILN" --json attn bench --decode --batch "$b" --heads "$h" --kv-heads "$hkv" \
      --context "$ctx" --dim "$d" --page-size "$ps" --seqlen-q "$sq" $causal --reps 30
    peer_shapes="$peer_shapes;$b,$h,$hkv,$ctx,$d,$sq"
  done <<< "$DECODE_SHAPES"
  step peers-decode 300 "$PY" scripts/peers.py decode --shapes "${peer_shapes#;}"
  table
  echo
  DECODE_SHAPES=$DECODE_SHAPES "$PY" - "$D" <<'EOF' | tee "$D/summary.txt"
import json, os, sys
d = sys.argv[1]
peers = {}
sys.path.insert(0, "scripts")
from jsonl import rows as jsonl_rows
try:
    for r in jsonl_rows(os.path.join(d, "peers-decode.txt"), must='"batch"'):
        peers[(r["batch"], r["heads"], r["kv_heads"], r["context"], r["dim"], r["seqlen_q"])] = r
except OSError:
    pass
print(f"{'problem':14} {'splits':>6} {'kiln us':>9} {'GB/s':>7} {'of copy':>8} {'torch us':>9} {'backend':>10} {'x torch':>8}")
for line in os.environ["DECODE_SHAPES"].splitlines():
    name, b, h, hkv, ctx, dim, ps, sq = line.split()
    try:
        k = json.load(open(os.path.join(d, f"kiln-{name}.json")))
    except (OSError, ValueError):
        print(f"{name:14} (no kiln result)")
        continue
    t = k["timing"]
    p = peers.get(tuple(int(x) for x in (b, h, hkv, ctx, dim, sq)), {})
    tu = p.get("best_us")
    ratio = f"{tu / t['median_us']:8.2f}" if tu else f"{'-':>8}"
    tus = f"{tu:9.1f}" if tu else f"{'-':>9}"
    print(f"{name:14} {t['splits']:6d} {t['median_us']:9.1f} {t['gbps']:7.0f} {100 * k['of_copy']:7.1f}% {tus} {p.get('best', '-'):>10} {ratio}")
EOF
  ;;

norms)
  need_bin "$KILN"; machine "$KILN"
  step_json pointwise-verify 90 "$KILN" --no-store --json pointwise verify
  step pointwise-verify-table 90 "$KILN" --no-store pointwise verify
  step pointwise-bench 60 "$KILN" --no-store pointwise bench
  use_wheel
  OUT=$D step python-pointwise 200 "$PY" python/tests/gpu_check.py --only pointwise
  step bench-model 420 "$PY" -m kiln.bench_model --models llama,qwen2 --layers 2 --prefill 1x4096,4x2048 \
    --decode 1,64 --json "$D/bench_model.json"
  table
  echo
  for f in pointwise-verify-table pointwise-bench python-pointwise bench-model; do
    echo "== $f"; grep -E '^\||checks|FAIL|pointwise|kiln .* ms' "$D/$f.txt" | tail -40
  done | tee "$D/summary.txt"
  ;;

attn-pair)
  [ $# -eq 2 ] || { echo "attn-pair takes OLD_BIN NEW_BIN" >&2; exit 2; }
  OLD=$(abspath "$1"); NEW=$(abspath "$2")
  need_bin "$OLD" "$NEW"; machine "$OLD" "$NEW"
  pairs=(
    "fwd-quick|attn verify --suite quick"
    "strided|attn verify --strided"
    "bwd-quick|attn verify --backward --suite quick"
    "decode|attn verify --decode"
    "varlen|attn verify --varlen-suite"
  )
  for p in "${pairs[@]}"; do
    name=${p%%|*}; read -ra args <<< "${p#*|}"
    step_json "$name-old" 90 "$OLD" --no-store --json "${args[@]}"
    step_json "$name-new" 90 "$NEW" --no-store --json "${args[@]}"
    step "$name-pair" 20 python3 scripts/verify-pair.py "$D/$name-old.json" "$D/$name-new.json"
  done
  table
  echo; for p in "${pairs[@]}"; do echo "== ${p%%|*}"; tail -3 "$D/${p%%|*}-pair.txt"; done ;;

lab-pair)
  [ $# -eq 2 ] || { echo "lab-pair takes OLD_BIN NEW_BIN" >&2; exit 2; }
  OLD=$(abspath "$1"); NEW=$(abspath "$2")
  need_bin "$OLD" "$NEW"; machine "$OLD" "$NEW"
  B=(--reps 10 --warmup 3)
  for lab in old new; do
    bin=$OLD; [ $lab = new ] && bin=$NEW
    # (the first run compiles the suite's variants cold: over 60 s on an H200, 2026-11-29)
    lim=150; [ $lab = new ] && lim=90
    step_json "gemm-quick-$lab" $lim "$bin" --no-store --json verify --suite quick
    step "fuzz-dry-$lab" 20 "$bin" --no-store fuzz --seed 1 --gemm 300 --dry-run
    step "fuzz-$lab" 120 "$bin" --no-store fuzz --seed 1 --gemm 50 --attention 20 --moe 0 --fp8 0 \
      --moe-layer 0 --out "$D/fuzz-$lab.json" --failures "$D/failures-$lab.jsonl"
  done
  step gemm-quick-pair 20 "$PY" scripts/verify-pair.py "$D/gemm-quick-old.json" "$D/gemm-quick-new.json"
  step fuzz-dry-same 10 diff "$D/fuzz-dry-old.txt" "$D/fuzz-dry-new.txt"
  step fuzz-same 10 "$PY" -c 'import json, sys
t = [[(r["op"], r["version"], r["checks"], r["passed"], r["failed"], r["skipped"])
      for r in json.load(open(f))["by_version"]] for f in sys.argv[1:]]
print(*t[1], sep="\n"); sys.exit(0 if t[0] == t[1] else 1)' "$D/fuzz-old.json" "$D/fuzz-new.json"
  for lab in old new; do
    bin=$OLD; [ $lab = new ] && bin=$NEW
    step "bench-attn-$lab" 60 "$bin" --no-store attn bench --batch 2 --heads 16 --seqlen 4096 --dim 128 "${B[@]}"
    step "bench-bwd-$lab" 60 "$bin" --no-store attn bench --backward --batch 2 --heads 16 --seqlen 4096 \
      --dim 128 "${B[@]}"
    step "bench-decode-$lab" 60 "$bin" --no-store attn bench --decode --context 8192 "${B[@]}"
    step "bench-varlen-$lab" 60 "$bin" --no-store attn bench --varlen-count 16 --varlen-range 128:4096 \
      --seed 3 "${B[@]}"
    step "bench-gemm-$lab" 60 "$bin" --no-store bench --shape 4096x4096x4096 "${B[@]}"
  done
  table
  echo; for f in gemm-quick-pair fuzz-dry-same fuzz-same; do echo "== $f"; tail -4 "$D/$f.txt"; done
  for b in attn bwd decode varlen gemm; do
    echo "== bench-$b (old, then new)"; grep -E '^\|' "$D/bench-$b-old.txt" "$D/bench-$b-new.txt"
  done ;;

candle)
  EX=$(abspath "${CANDLE_EXAMPLE:-$ROOT/target/release/examples/block}")
  need_bin "$EX"; machine "$EX"
  # The example links libcudart, libnvrtc, libcublas(Lt) and libcurand (candle links at build
  # time): this repository's .deps/cuda13 (scripts/candle.sh), else a Python environment's
  # CUDA 13 wheels (torch's), else the toolkit.
  libdirs=$ROOT/.deps/cuda13/nvidia/cu13/lib
  for d in $("$PY" -c 'import site, glob; print(" ".join(sorted({p.rsplit("/", 1)[0] for s in site.getsitepackages() + [site.getusersitepackages()] for p in glob.glob(s + "/nvidia/*/lib/lib*.so.*")})))' 2>/dev/null) /usr/local/cuda/lib64; do
    [ -d "$d" ] && libdirs="$libdirs:$d"
  done
  export LD_LIBRARY_PATH="$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  step libs 20 bash -c "ldd '$EX' | grep -E 'cuda|nvrtc|cublas|curand'; ! ldd '$EX' | grep -q 'not found'"
  step check 90 "$EX"
  step time 120 "$EX" --time
  step time-causal 120 "$EX" --time --causal
  table
  echo; for f in check time time-causal; do cat "$D/$f.txt"; echo; done ;;

bwd-tail)
  # The non-causal backward's last partial wave split into parts (ledger B20): 2,048 key blocks
  # on 132 SMs leave 64 SMs idle in the 16th wave. Verified, then `bwd_fa3_tail` timed beside the
  # default in one process (alternate processes moved 4-7 % at the power cap: round 1a).
  need_bin "$KILN"; machine "$KILN"
  step btail-verify-d64 90 "$KILN" attn verify --backward --version bwd_fa3_tail --version bwd_fa3_m128_fma \
    --version bwd_fa3_tail --batch 1 --heads 15 --kv-heads 5 --seqlen 4096 --dim 64
  step btail-verify-d128 90 "$KILN" attn verify --backward --version bwd_fa3_tail --batch 1 --heads 2 \
    --seqlen-q 1000 --seqlen-kv 3000 --dim 128 --dtype f16 --layout BHSD
  step btail-quick 120 env KILN_BWD_TAIL=3 "$KILN" attn verify --backward --suite quick --version bwd_fa3_lookahead
  for sh in "4 16 4096 64 bwd_fa3_m128_fma" "1 16 16384 64 bwd_fa3_m128_fma" "2 16 8192 128 bwd_fa3_lookahead"; do
    read -r b h s d v <<< "$sh"
    step "btail-ab-d$d-b$b-s$s" 60 "$KILN" attn bench --backward --batch "$b" --heads "$h" --seqlen "$s" --dim "$d" \
      --reps 20 --warmup 2 --warmup-ms 1000 --version "$v" --version bwd_fa3_tail --version "$v" --version bwd_fa3_tail
  done
  table ;;

bwd-compact)
  # The packed grid with the sequences' key blocks back to back (ledger B23): the longest
  # sequence's key blocks x sequences grid launched 13,680 empty blocks of its 32,768 at the
  # issue's packed batch. A knob: the ratio to the dense call in the same process compares runs.
  need_bin "$KILN"; machine "$KILN"
  step bcompact-suite 90 env KILN_BWD_VARLEN_COMPACT=1 "$KILN" attn verify --backward --varlen-suite
  step bcompact-gqa-window 90 env KILN_BWD_VARLEN_COMPACT=1 "$KILN" attn verify --backward --varlen-count 32 \
    --varlen-range 128:1024 --seed 1 --heads 8 --kv-heads 2 --dim 128 --causal --window 256,0
  for d in 64 128; do
    for i in 1 2 3 4; do
      k=$(( (i + 1) % 2 ))
      step "bcompact-d$d-$i-k$k" 60 env KILN_BWD_VARLEN_COMPACT=$k "$KILN" attn bench --backward --varlen-count 32 --seed 1 \
        --heads 16 --dim "$d" --reps 10 --warmup 3 --warmup-ms 300
    done
  done
  table ;;

*)
  echo "unknown task \`$task\`: bash scripts/gpu.sh help lists them" >&2
  exit 2 ;;
esac
exit $status
