/* names.h — NCCL's datatypes and reduction ops, as the logs and messages
 * name them.
 *
 * Must not: include anything of the shim's but leaf headers. */
#ifndef NSC_NAMES_H
#define NSC_NAMES_H

#include <nccl.h>
#include <stddef.h>

/* Bytes per element of an NCCL datatype, 0 if unknown. */
size_t nsc_dtype_size(ncclDataType_t dt);
const char *nsc_dtype_name(ncclDataType_t dt);
/* "sum" ... "avg"; "none" for a call that does not reduce (op < 0). */
const char *nsc_op_name(ncclRedOp_t op);

#endif
