/* group.c — a group's plan (plan.h): at the outermost ncclGroupEnd, before
 * the real one, the fused members of the group (FUSE plans, made at their
 * calls) are packed into buckets, and each bucket gets a plan the executor
 * runs as it runs any call's: a segmented cast into one wire buffer, one
 * real all-reduce in the wire type, a segmented cast back; or, for a bucket
 * whose total stays below NCCLSHIM_MIN_BYTES, its members forwarded in fp32
 * one by one.
 *
 * Every rank packs the same buckets: the rules read the sequence of
 * (count, op, communicator, memory kind) of the group's members, which every
 * rank's program makes alike, and never a stream handle (local to a rank:
 * it only says where a bucket runs here).
 *
 * Must not: allocate (the members are linked through their own fields, so
 * what is issued cannot depend on host memory), call NCCL, or read anything
 * but its arguments. */
#include "plan.h"

static int same_key(const nsc_member *a, const nsc_member *b) {
  return a->comm == b->comm && a->op == b->op && a->kind == b->kind;
}

nsc_member *nsc_decide_group(nsc_member *first, const nsc_config *cfg) {
  for (nsc_member *m = first; m; m = m->next) {
    m->bnext = m->bucket_next = NULL;
    m->nb = 0;
    m->total = 0;
    m->home = m->stream;
    m->done = 0;
  }
  const size_t cap = (size_t)cfg->fuse_bytes / 4;
  nsc_member *buckets = NULL, **tail = &buckets;
  for (nsc_member *i = first; i; i = i->next) {
    if (i->done) continue;
    uintptr_t home = i->stream; /* the communicator's first fused member's stream */
    for (nsc_member *k = first; k != i; k = k->next)
      if (k->comm == i->comm) {
        home = k->stream;
        break;
      }
    nsc_member *head = NULL, *last = NULL;
    for (nsc_member *j = i; j; j = j->next) {
      if (j->done || !same_key(i, j)) continue;
      if (head && head->total + j->count > cap) { /* full: the next member starts a bucket */
        *tail = head;
        tail = &head->bucket_next;
        head = last = NULL;
      }
      if (last) last->bnext = j;
      else head = j, head->home = home;
      last = j;
      head->nb++;
      head->total += j->count;
      j->done = 1;
    }
    if (head) {
      *tail = head;
      tail = &head->bucket_next;
    }
  }
  return buckets;
}

void nsc_plan_bucket(nsc_plan *p, const nsc_config *cfg, const nsc_member *head) {
  size_t T = head->total;
  int avg = head->op == ncclAvg;
  nsc_plan_init(p, cfg, 0, T, nsc_cost_rule_of(0, 0)); /* one launch: no chunk, no codec counted */
  if (T * 4 < (size_t)cfg->min_bytes) { /* the bucket's total: its members as they are */
    p->alg = NSC_ALG_PLAIN;
    p->why = NSC_WHY_MIN_BYTES;
    nsc_plan_step(p, NSC_STEP_ALLREDUCE, NSC_ON_ALL, NSC_STEP_CALL, T, NSC_BUF_SEND, 0, NSC_BUF_RECV, 0, avg, 0);
    p->launches = head->nb;
    return;
  }
  p->alg = NSC_ALG_FUSE;
  p->why = NSC_WHY_FUSED;
  nsc_plan_step(p, NSC_STEP_SEG_CAST_IN, NSC_ON_ALL, 0, T, NSC_BUF_SEND, 0, NSC_BUF_TMP, 0, 0, 0);
  nsc_plan_step(p, NSC_STEP_ALLREDUCE, NSC_ON_ALL, NSC_STEP_WIRE, T, NSC_BUF_TMP, 0, NSC_BUF_TMP, 0, avg, 0);
  nsc_plan_step(p, NSC_STEP_SEG_CAST_OUT, NSC_ON_ALL, 0, T, NSC_BUF_TMP, 0, NSC_BUF_RECV, 0, 0, 0);
  p->launches = 1;
  p->staging = nsc_plan_staging(p, nsc_plan_round);
  /* one wire buffer, not bounded by NCCLSHIM_MAX_STAGING_BYTES (limited 0) */
}
