/* names.h — NCCL's datatypes and reduction ops, as the logs and messages
 * name them.
 *
 * Must not: include anything of the shim's but leaf headers. */
#ifndef NSC_NAMES_H
#define NSC_NAMES_H

#include <nccl.h>
#include <stddef.h>

/* Bytes per element of an NCCL datatype, 0 if unknown (on every call's
 * path: inline). */
static inline size_t nsc_dtype_size(ncclDataType_t dt) {
  switch (dt) {
  case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
  case ncclFloat16: case ncclBfloat16: return 2;
  case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
  case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
  default: return 0;
  }
}
const char *nsc_dtype_name(ncclDataType_t dt);
/* "sum" ... "avg"; "none" for a call that does not reduce (op < 0). */
const char *nsc_op_name(ncclRedOp_t op);

#endif
