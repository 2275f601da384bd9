/* redop.c — the host NCCL's reduction operators: resolving an ncclRedOp_t for
 * a call, and ncclRedOpCreatePreMulSum / ncclRedOpDestroy.
 *
 * Built-in ops map to a reduction; ncclAvg becomes, as in NCCL, a PreMulSum by
 * 1/nranks rounded to the datatype for floating types and a sum followed by a
 * truncating division for integers. Created ops are per communicator, bound to
 * one datatype, numbered ncclNumOps + index; a host-immediate scalar is copied
 * at creation, a "device" one is read when the operation runs. A call copies
 * what it needs (hn_red), so an op may be destroyed once the call returned.
 *
 * Must not: communicate, or keep comm->lock beyond a table lookup. */
#include "hostnccl.h"

#include <stdlib.h>
#include <string.h>

ncclResult_t hn_resolve_op(ncclComm_t comm, ncclRedOp_t op, ncclDataType_t type, hn_red *red,
                           const char *fn) {
  memset(red, 0, sizeof *red);
  if ((int)op >= 0 && op < ncclNumOps) {
    if (op == ncclAvg && hn_cfg()->version < 21003)
      return hn_err(ncclInvalidArgument, "%s: ncclAvg needs NCCL 2.10.3 (pretending %d)", fn, hn_cfg()->version);
    static const enum hn_redop map[] = {HN_SUM, HN_PROD, HN_MAX, HN_MIN, HN_SUM};
    red->op = map[op];
    red->user_op = op;
    if (op == ncclAvg && hn_type_is_float(type)) {
      red->premul = 1;
      hn_scalar_from_double(type, 1.0 / comm->nranks, red->scalar);
    } else if (op == ncclAvg) {
      red->postdiv = 1;
    }
    return ncclSuccess;
  }
  int idx = (int)op - ncclNumOps;
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&comm->lock);
  if ((int)op < 0 || idx >= comm->nops || !comm->ops[idx].live) {
    res = hn_err(ncclInvalidArgument, "%s: invalid reduction operation %d", fn, (int)op);
  } else if (comm->ops[idx].type != type) {
    res = hn_err(ncclInvalidArgument, "%s: PreMulSum op %d was created for %s, used with %s", fn,
                 (int)op, hn_type_name(comm->ops[idx].type), hn_type_name(type));
  } else {
    red->op = HN_SUM;
    red->user_op = ncclSum; /* ranks may scale by different scalars */
    red->premul = 1;
    if (comm->ops[idx].residence == ncclScalarDevice) red->scalar_ptr = comm->ops[idx].ptr;
    else memcpy(red->scalar, comm->ops[idx].value, sizeof red->scalar);
  }
  pthread_mutex_unlock(&comm->lock);
  return res;
}

ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                       ncclScalarResidence_t residence, ncclComm_t comm) {
  const char *fn = "ncclRedOpCreatePreMulSum";
  HN_CHECK(hn_init());
  HN_CHECK(hn_check_comm(comm, fn));
  if (hn_cfg()->version < 21104)
    return hn_err(ncclInvalidUsage, "%s: needs NCCL 2.11.4 (pretending %d)", fn, hn_cfg()->version);
  if (!op || !scalar) return hn_err(ncclInvalidArgument, "%s: op or scalar is NULL", fn);
  if ((int)datatype < 0 || datatype >= ncclNumTypes)
    return hn_err(ncclInvalidArgument, "%s: invalid datatype %d", fn, (int)datatype);
  if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate)
    return hn_err(ncclInvalidArgument, "%s: invalid residence %d", fn, (int)residence);
  pthread_mutex_lock(&comm->lock);
  int idx = 0;
  while (idx < comm->nops && comm->ops[idx].live) idx++;
  if (idx == comm->nops) {
    hn_premul_op *p = realloc(comm->ops, (size_t)(comm->nops + 1) * sizeof *p);
    if (!p) {
      pthread_mutex_unlock(&comm->lock);
      return hn_err(ncclSystemError, "hostnccl: out of host memory");
    }
    comm->ops = p;
    comm->nops++;
  }
  hn_premul_op *o = &comm->ops[idx];
  memset(o, 0, sizeof *o);
  o->live = 1;
  o->type = datatype;
  o->residence = residence;
  o->ptr = scalar;
  memcpy(o->value, scalar, hn_type_size(datatype)); /* host-immediate: read now */
  pthread_mutex_unlock(&comm->lock);
  *op = (ncclRedOp_t)(ncclNumOps + idx);
  return ncclSuccess;
}
HN_ALIAS(ncclRedOpCreatePreMulSum);

ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  const char *fn = "ncclRedOpDestroy";
  HN_CHECK(hn_check_comm(comm, fn));
  int idx = (int)op - ncclNumOps;
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&comm->lock);
  if ((int)op < ncclNumOps || idx >= comm->nops || !comm->ops[idx].live)
    res = hn_err(ncclInvalidArgument, "%s: %d is not an operator created on this communicator", fn, (int)op);
  else
    comm->ops[idx].live = 0;
  pthread_mutex_unlock(&comm->lock);
  return res;
}
HN_ALIAS(ncclRedOpDestroy);
