/* steps.c — the table of step handlers (exec.h): what runs a step of each
 * kind, and the call itself (NSC_STEP_CALL: forwarded, answer.c) and a
 * collective in the wire type (NSC_STEP_WIRE: the ring's and a bucket's,
 * ring.c); the walk looks a step's up (exec.h: nsc_step_handler_of).
 *
 * Must not: hold anything but the table. */
#include "exec.h"

const nsc_step_handler nsc_step_handlers[NSC_STEP_COUNT] = {
    [NSC_STEP_ALLREDUCE] = {nsc_step_collective, NULL},
    [NSC_STEP_REDUCESCATTER] = {nsc_step_collective, NULL},
    [NSC_STEP_ALLGATHER] = {nsc_step_collective, NULL},
    [NSC_STEP_REDUCE] = {nsc_step_collective, NULL},
    [NSC_STEP_TWOPHASE] = {nsc_step_twophase, nsc_twophase_unrun},
    [NSC_STEP_CAST_IN] = {nsc_step_cast_in, NULL},
    [NSC_STEP_CAST_OUT] = {nsc_step_cast_out, NULL},
    [NSC_STEP_LOCAL] = {nsc_step_local, NULL},
    [NSC_STEP_SEG_CAST_IN] = {nsc_step_seg_cast_in, NULL},
    [NSC_STEP_SEG_CAST_OUT] = {nsc_step_cast_out, NULL},
};
const nsc_step_handler nsc_step_call_handler = {nsc_step_forward, NULL};
const nsc_step_handler nsc_step_wire_handler = {nsc_step_wire, NULL};
