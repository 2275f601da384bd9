/* ddp_opts.c — command line of bench/ddp_step (see ddp.h for the fields).
 *
 * Must not: touch MPI or NCCL, or print: every rank parses the same argv to
 * the same options, and a bad flag fails on every rank alike. Sizes accept the
 * K/M/G suffixes of allreduce_perf (powers of 1024, perf_parse_size). */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp.h"
#include "perf_args.h"

static const char usage[] =
    "usage: mpirun -np W ddp_step [options]\n"
    "  Emulates DDP's reducer on W ranks: naive gradient accumulation (every\n"
    "  micro-step all-reduces its buckets; the shim may skip K-1 of them) or the\n"
    "  no_sync reference. Prints per-optimizer-step all-reduce calls, wire bytes\n"
    "  and time inside ncclAllReduce, and a hash of the final parameters.\n"
    "  --params N        floats in the model (K/M/G suffixes; default 1M)\n"
    "  --accum K         micro-steps per optimizer step (default 4)\n"
    "  --warmup N        optimizer steps before the measured ones (default 2)\n"
    "  --steps N         measured optimizer steps (default 2)\n"
    "  --nosync          reference: no all-reduce on the K-1 non-final micro-steps\n"
    "  --view            gradient_as_bucket_view=True (the bucket is the grad storage)\n"
    "  --find-unused     find_unused_parameters=True: capped buckets from the start\n"
    "  --first-cap B     first rebuilt bucket's cap in bytes (default 512K; DDP 1M)\n"
    "  --cap B           other buckets' cap in bytes (default 2M; DDP 25M)\n"
    "  --quant T         reference: reduce buckets as off|fp16|bf16 (cast, ring sum, cast back)\n"
    "  --quant-min B     ... buckets of at least B fp32 bytes (default 64K, the shim's MIN_BYTES)\n"
    "  --drop-at I       micro-step I leaves one parameter without gradient (fewer bytes)\n"
    "  --no-align        no untimed barrier before each timed all-reduce\n"
    "  --quiet           no per-step table\n"
    "  --dump FILE       write every rank's final parameters (float32, rank-major)\n"
    "  --against FILE    compare final parameters with a dump; exit 1 if max|diff| > tol\n"
    "  --tol X           allowed max abs difference for --against (default 0: bit-exact)\n";

const char *ddp_usage(void) { return usage; }


enum { O_PARAMS = 256, O_WARMUP, O_STEPS, O_NOSYNC, O_VIEW, O_FINDUNUSED, O_FIRSTCAP, O_CAP, O_QUANT,
       O_QUANTMIN, O_DROP, O_NOALIGN, O_QUIET, O_DUMP, O_AGAINST, O_TOL };

int ddp_parse_args(int argc, char **argv, ddp_opts *o, char *err, size_t errlen) {
  static const struct option opts[] = {
      {"params", 1, 0, O_PARAMS},     {"accum", 1, 0, 'K'},        {"warmup", 1, 0, O_WARMUP},
      {"steps", 1, 0, O_STEPS},       {"nosync", 0, 0, O_NOSYNC},  {"view", 0, 0, O_VIEW},
      {"find-unused", 0, 0, O_FINDUNUSED}, {"first-cap", 1, 0, O_FIRSTCAP}, {"cap", 1, 0, O_CAP},
      {"quant", 1, 0, O_QUANT},       {"quant-min", 1, 0, O_QUANTMIN}, {"drop-at", 1, 0, O_DROP},
      {"no-align", 0, 0, O_NOALIGN},  {"quiet", 0, 0, O_QUIET},    {"dump", 1, 0, O_DUMP},
      {"against", 1, 0, O_AGAINST},   {"tol", 1, 0, O_TOL},        {"help", 0, 0, 'h'},
      {0, 0, 0, 0}};
  *o = (ddp_opts){.nparams = 1 << 20, .K = 4, .warmup = 2, .steps = 2, .first_cap = 512 << 10,
                  .cap = 2 << 20, .quant_min = 64 << 10, .drop_at = -1, .align = 1};
  optind = 1;
  opterr = 0;
  int c;
  long v;
  double d;
  while ((c = getopt_long(argc, argv, "K:h", opts, NULL)) != -1) {
    switch (c) {
    case O_PARAMS: case O_FIRSTCAP: case O_CAP: case O_QUANTMIN:
      if ((d = perf_parse_size(optarg)) < 0 || d > (double)(1LL << 40))
        return perf_fail(err, errlen, "invalid size for --%s: '%s'", argv[optind - 1] + 2, optarg);
      if (c == O_PARAMS) o->nparams = (size_t)d;
      else if (c == O_FIRSTCAP) o->first_cap = (size_t)d;
      else if (c == O_CAP) o->cap = (size_t)d;
      else o->quant_min = (size_t)d;
      break;
    case 'K':
      if (perf_parse_int(optarg, 1, 1 << 16, &v)) return perf_fail(err, errlen, "invalid --accum '%s' (1..65536)", optarg);
      o->K = (int)v;
      break;
    case O_WARMUP: case O_STEPS:
      if (perf_parse_int(optarg, c == O_STEPS ? 1 : 0, 1 << 20, &v))
        return perf_fail(err, errlen, "invalid --%s '%s'", c == O_STEPS ? "steps" : "warmup", optarg);
      *(c == O_STEPS ? &o->steps : &o->warmup) = (int)v;
      break;
    case O_DROP:
      if (perf_parse_int(optarg, 0, 1L << 40, &v)) return perf_fail(err, errlen, "invalid --drop-at '%s'", optarg);
      o->drop_at = v;
      break;
    case O_QUANT:
      if (!strcmp(optarg, "off")) o->quant = DDP_QUANT_OFF;
      else if (!strcmp(optarg, "fp16")) o->quant = DDP_QUANT_FP16;
      else if (!strcmp(optarg, "bf16")) o->quant = DDP_QUANT_BF16;
      else return perf_fail(err, errlen, "invalid --quant '%s' (off|fp16|bf16)", optarg);
      break;
    case O_TOL: {
      char *end;
      errno = 0;
      o->tol = strtod(optarg, &end);
      if (end == optarg || *end || errno || !(o->tol >= 0)) return perf_fail(err, errlen, "invalid --tol '%s'", optarg);
      break;
    }
    case O_NOSYNC: o->nosync = 1; break;
    case O_VIEW: o->view = 1; break;
    case O_FINDUNUSED: o->find_unused = 1; break;
    case O_NOALIGN: o->align = 0; break;
    case O_QUIET: o->quiet = 1; break;
    case O_DUMP: o->dump = optarg; break;
    case O_AGAINST: o->against = optarg; break;
    case 'h': perf_fail(err, errlen, "%s", usage); return 1;
    default: return perf_fail(err, errlen, "unknown or incomplete option '%s'\n%s", argv[optind - 1], usage);
    }
  }
  if (optind < argc) return perf_fail(err, errlen, "unexpected argument '%s'", argv[optind]);
  if (o->nparams < 4096) return perf_fail(err, errlen, "--params must be at least 4096 floats");
  if (o->first_cap == 0 || o->cap == 0) return perf_fail(err, errlen, "bucket caps must be > 0");
  if (o->drop_at >= (long)(o->warmup + o->steps) * o->K)
    return perf_fail(err, errlen, "--drop-at %ld is past the last micro-step (%ld)", o->drop_at,
                (long)(o->warmup + o->steps) * o->K - 1);
  return 0;
}
