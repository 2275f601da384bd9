build-w/obj/tests/log/fake_nvtx.o: tests/log/fake_nvtx.c
