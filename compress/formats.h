/* formats.h — the wire formats, one row each: everything else that names a
 * format is made from these rows, so that a format is its row, its
 * element rules (wire_bits.h), its host codec (wire_ref.c, wire.c), its
 * kernels (kernels.cu) and its tests, and nothing else:
 *   - wire.h's nsc_fmt_t, names, code sizes and encoded sizes;
 *   - NCCLSHIM_COMPRESS's choices and its NSC_COMPRESS_* values (config.def,
 *     config.h: off, then the rows in order);
 *   - the wire datatype the log names, whether a format is block-scaled (two
 *     phases only), the kernels a format has (cu_abi.h, cu_kernels.c);
 *   - the docs' table (`ncclshim-envdoc --formats`, docs/collectives.md),
 *     the tuner's list (`--formats-py`, env/ncclshim/formats.py) and the tests'
 *     bounds (nsc_fmt_bound, bench/perf_data.c, tests/shim/shim_twophase.c,
 *     the fuzzer), all checked against this file by 05-unit.
 *
 * NSC_FORMATS(X) lists X(ID, name, bits, blocked, dt, k, bound, zero, doc):
 *   ID       NSC_FMT_<ID>; NCCLSHIM_COMPRESS's value is its position + 1
 *   name     NCCLSHIM_COMPRESS's value, the log's and the tuner's name
 *   bits     bits per code: 16 or 8 (whole bytes, little-endian), or 4
 *            (two codes per byte, element 2i in the low nibble)
 *   blocked  1: a 16-bit power-of-two scale per NCCLSHIM_BLOCK_ELEMS
 *            elements ahead of the codes; NCCL cannot sum such runs, so these
 *            formats run in two phases (flat or hierarchical) only
 *   dt       the NCCL datatype the log names as the wire type
 *   k        the kernels' suffix (tp_dec_<k>, tp_sum_<k>, tp_encx_<k>, and
 *            for the block-scaled ones tp_enc_<k>; fp16/bf16 encode with the
 *            plain casts)
 *   bound    one rounding's largest error, as a fraction of |x| (16-bit
 *            floats) or of the block's largest |x| (block-scaled), away from
 *            the ranges wire_bits.h names (overflow, top blocks, Inf/NaN)
 *   zero     block-scaled: values about 2^zero and more below the block's
 *            largest are flushed to zero (the log's advice); 0 otherwise
 *   doc      one line for the docs' table
 *
 * The format enum nsc_fmt_t (NSC_FMT_<ID>, in the rows' order) is made here
 * from the rows, so that the casts (cast.h), the codec (wire.h), the
 * setting's values (config.h: NSC_COMPRESS_<ID> is NSC_FMT_<ID> + 1) and the
 * kernels' template argument (kernels.cu: F is an nsc_fmt_t, its code bits
 * and blocking read from the row) name a format one way.
 *
 * Must not: include anything, or hold anything but the rows and what is made
 * from them (NVRTC compiles it with the kernels: compress/module.mk). */
#ifndef NSC_FORMATS_H
#define NSC_FORMATS_H

#define NSC_FORMATS(X)                                                                                                 \
  X(FP16, "fp16", 16, 0, ncclFloat16, f16, 0x1p-11, 0,                                                               \
    "IEEE half: 11 bits, values from 6e-5 to 65504 (below: fewer bits down to 6e-8, then 0; above: Inf)")             \
  X(BF16, "bf16", 16, 0, ncclBfloat16, bf16, 0x1p-8, 0, "bfloat16: 8 bits over fp32's range (NCCL >= 2.10)")         \
  X(INT8, "int8", 8, 1, ncclInt8, int8, 1 / 127.5, 8,                                                                \
    "8-bit integers times the block's power-of-two scale; values 2^8 and more below the block's largest become 0")    \
  X(FP8, "fp8", 8, 1, ncclFloat8e4m3, fp8, 0x1p-4 + 0x1p-17, 17,                                                     \
    "e4m3 floats times the block's scale: 4 bits relative down to 2^-14 of the block's largest, 0 at 2^-17")          \
  X(FP16S, "fp16s", 16, 1, ncclFloat16, f16s, 0x1p-11 + 0x1p-39, 39,                                                 \
    "fp16 codes times the block's scale: 11 bits relative over 29 binades under the block's largest, 0 at 2^-39")     \
  X(INT4, "int4", 4, 1, ncclUint8, int4, 1 / 7.5, 4,                                                                 \
    "4-bit integers (-7..7) times the block's scale, two per byte: a quarter of fp16's bytes; values 2^4 and more "   \
    "below the block's largest become 0 (ZeRO++'s qgZ format, here with fp32 sums)")

/* The formats, in the rows' order. */
typedef enum {
#define NSC_FMT_ENUM(ID, name, bits, blocked, dt, k, bound, zero, doc) NSC_FMT_##ID,
  NSC_FORMATS(NSC_FMT_ENUM)
#undef NSC_FMT_ENUM
  NSC_FMT_COUNT
} nsc_fmt_t;

#endif
