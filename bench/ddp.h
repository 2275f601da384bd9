/* ddp.h — internal interface of bench/ddp_step, an emulation of PyTorch DDP's
 * reducer on W MPI ranks (host buffers, over whatever libnccl.so.2 is loaded)
 * used to prove and measure the shim's K-step accumulation.
 *
 * The pieces: ddp_opts.c (command line), ddp_model.c (parameter tensors,
 * bucket layouts and their rebuild, exact gradients, SGD, hashes, dumps),
 * ddp_comm.c (timed all-reduces, shim counters, the quantizing reference),
 * ddp_step.c (the training loop and the report).
 *
 * Must not: link the shim (ncclshim_get_stats is looked up with dlsym), or let
 * anything but options and rank decide which collectives are issued. */
#ifndef DDP_H
#define DDP_H

#include <nccl.h>
#include <stddef.h>
#include <stdint.h>

#include "ncclshim.h"

/* ---- ddp_opts.c ---- */
enum { DDP_QUANT_OFF = 0, DDP_QUANT_FP16 = 1, DDP_QUANT_BF16 = 2 };

typedef struct {
  size_t nparams;      /* P: floats in the model */
  int K;               /* micro-steps per optimizer step */
  int warmup, steps;   /* optimizer steps: warm-up (reported, not summarised) and measured */
  int nosync;          /* reference: no_sync() on the K-1 non-final micro-steps */
  int view;            /* gradient_as_bucket_view=True */
  int find_unused;     /* find_unused_parameters=True: buckets from the start, no rebuild */
  size_t first_cap, cap; /* bucket caps in bytes (DDP: 1 MiB, 25 MiB) */
  int quant;           /* reference: reduce buckets in this wire type (fp32->wire->ring sum->fp32) */
  size_t quant_min;    /* ... when the bucket has at least this many fp32 bytes */
  long drop_at;        /* micro-step whose pass leaves one parameter without gradient (-1: none) */
  int align;           /* untimed MPI barrier before every timed all-reduce */
  int quiet;           /* no per-step table */
  const char *dump;    /* write every rank's final parameters here (rank 0) */
  const char *against; /* compare final parameters with such a file */
  double tol;          /* ... allowed max abs difference (0: bit-exact) */
} ddp_opts;

/* Parse argv. Returns 0; 1 when --help was asked (usage in err); -1 with a
 * message in err. Pure: every rank parses alike. */
int ddp_parse_args(int argc, char **argv, ddp_opts *o, char *err, size_t errlen);
const char *ddp_usage(void);

/* ---- ddp_model.c ---- */
typedef struct {
  size_t off, n;       /* slice of the flat parameter array */
} ddp_tensor;

typedef struct {
  float *data;         /* the bucket's own storage (new at every (re)build) */
  size_t count;        /* floats */
  int first, last;     /* tensors [first..last] in arrival order: param index = nt-1-arrival */
} ddp_bucket;

typedef struct {
  int nb;
  ddp_bucket *b;
  size_t *boff;        /* per tensor: offset in its bucket */
  int *bidx;           /* per tensor: its bucket */
} ddp_layout;

typedef struct {
  size_t P;
  int nt;
  ddp_tensor *t;
  float *p, *mom;      /* parameters, momentum buffers */
  float *g;            /* param.grad storage when not a bucket view */
  int view;
  ddp_layout lay;
} ddp_model;

/* Tensors of varied sizes (an embedding, then weight/bias pairs) summing to P;
 * parameters initialised alike on every rank. */
int ddp_model_init(ddp_model *m, size_t P, int view);
void ddp_model_free(ddp_model *m);
/* (Re)build the buckets: whole model in one (caps 0), or DDP's assignment over
 * reverse parameter order with first_cap then cap. New storage every time; in
 * view mode the gradients move into it. */
int ddp_model_layout(ddp_model *m, size_t first_cap, size_t cap);
/* param.grad of tensor t (a bucket view in view mode). */
float *ddp_grad(const ddp_model *m, int t);
/* Autograd: grad += this rank's gradient for micro-step i (exact in fp16). */
void ddp_accumulate(const ddp_model *m, int t, long i, int rank, int W);
/* The tensor that a dropping pass leaves without gradient: the last of bucket 0. */
int ddp_drop_tensor(const ddp_model *m);
/* optimizer.step() (SGD with momentum) then zero_grad(). */
void ddp_sgd_step(ddp_model *m);
uint64_t ddp_hash(const float *x, size_t n);

/* ---- ddp_comm.c ---- */
typedef struct {
  uint64_t calls, logical_bytes;  /* ncclAllReduce calls this program made */
  uint64_t ns;                    /* wall time inside them */
  uint64_t bucket_ns;             /* ... inside the gradient buckets' calls */
  ncclshim_stats_t shim;          /* shim counters (zero without the shim) */
} ddp_counters;

typedef struct {
  ncclComm_t comm;
  int rank, W;
  int align;                      /* MPI_Barrier (untimed) before each call */
  int (*shim_stats)(ncclshim_stats_t *);
  ddp_counters c;                 /* running totals */
  uint16_t *wire;                 /* quantizing reference: wire buffer */
  size_t wire_cap;
} ddp_comm;

int ddp_comm_init(ddp_comm *c, int rank, int W, int align);
void ddp_comm_free(ddp_comm *c);
/* ncclAllReduce, timed and counted (bucket: a gradient bucket's call). With
 * align, the ranks meet at an untimed barrier first, so that the time is the
 * collective's and not the load imbalance of W ranks sharing fewer cores. */
ncclResult_t ddp_allreduce(ddp_comm *c, const void *send, void *recv, size_t count, ncclDataType_t dt,
                           ncclRedOp_t op, int bucket);
/* A gradient bucket, in place, fp32 Sum; with quant, through the wire type as
 * the shim would send it. */
ncclResult_t ddp_reduce_bucket(ddp_comm *c, float *buf, size_t count, int quant, size_t quant_min);
/* Running totals now (shim counters refreshed). */
void ddp_snapshot(ddp_comm *c, ddp_counters *out);
/* fp32 <-> fp16 / bf16, round to nearest even (Inf beyond range, NaN kept). */
uint16_t ddp_to_f16(float f);
float ddp_from_f16(uint16_t h);
uint16_t ddp_to_bf16(float f);
float ddp_from_bf16(uint16_t h);

#endif
