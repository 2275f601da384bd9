build-w/obj/tests/hostnccl/unsupported_newer.o: \
 tests/hostnccl/unsupported_newer.c
