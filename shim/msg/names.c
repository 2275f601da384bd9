/* names.c — see names.h. */
#include "names.h"

const char *nsc_dtype_name(ncclDataType_t dt) {
  static const char *n[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                            "half", "float", "double", "bfloat16", "f8e4m3", "f8e5m2"};
  return (unsigned)dt < sizeof n / sizeof n[0] ? n[dt] : "?";
}

const char *nsc_op_name(ncclRedOp_t op) {
  static const char *n[] = {"sum", "prod", "max", "min", "avg"};
  if ((int)op < 0) return "none"; /* a call that does not reduce (observed records) */
  return (unsigned)op < sizeof n / sizeof n[0] ? n[op] : "premulsum";
}
