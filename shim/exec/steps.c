/* steps.c — the table of step handlers (exec.h): what runs a step of each
 * kind. The walk (walk.c) looks a step's handler up here, but for the
 * call itself (NSC_STEP_CALL: forwarded, answer.c) and a collective in the
 * wire type (NSC_STEP_WIRE: the ring's and a bucket's, ring.c).
 *
 * Must not: hold anything but the table and its lookup. */
#include "exec.h"

const nsc_step_handler nsc_step_handlers[NSC_STEP_COUNT] = {
    [NSC_STEP_ALLREDUCE] = {nsc_step_collective, NULL, NULL},
    [NSC_STEP_REDUCESCATTER] = {nsc_step_collective, NULL, NULL},
    [NSC_STEP_ALLGATHER] = {nsc_step_collective, NULL, NULL},
    [NSC_STEP_REDUCE] = {nsc_step_collective, NULL, NULL},
    [NSC_STEP_TWOPHASE] = {nsc_step_twophase, nsc_twophase_claim, nsc_twophase_release},
    [NSC_STEP_CAST_IN] = {nsc_step_cast_in, NULL, NULL},
    [NSC_STEP_CAST_OUT] = {nsc_step_cast_out, NULL, NULL},
    [NSC_STEP_LOCAL] = {nsc_step_local, NULL, NULL},
    [NSC_STEP_SEG_CAST_IN] = {nsc_step_seg_cast_in, NULL, NULL},
    [NSC_STEP_SEG_CAST_OUT] = {nsc_step_cast_out, NULL, NULL},
};

const nsc_step_handler *nsc_step_handler_of(const nsc_step *st) {
  static const nsc_step_handler forward = {nsc_step_forward, NULL, NULL}, wire = {nsc_step_wire, NULL, NULL};
  if (st->flags & NSC_STEP_CALL) return &forward;
  if (st->flags & NSC_STEP_WIRE) return &wire;
  return (unsigned)st->kind < NSC_STEP_COUNT && nsc_step_handlers[st->kind].run ? &nsc_step_handlers[st->kind] : NULL;
}
