/* fatbin.S — embeds the CUDA kernels' fatbin (built by nvcc from kernels.cu,
 * or an empty file when nvcc is absent) as the hidden symbols nsc_fatbin and
 * nsc_fatbin_size, for cuModuleLoadData, and the kernels' source for NVRTC as
 * the NUL-terminated string nsc_kernels_src. NSC_FATBIN and NSC_KERNELS_RTC
 * are the files' paths as string literals, given by compress/module.mk.
 *
 * Must not: export anything (both symbols are hidden) or make the stack
 * executable. */
	.section .rodata.nsc_fatbin,"a",@progbits
	.balign 64
	.globl nsc_fatbin
	.hidden nsc_fatbin
	.type nsc_fatbin, @object
nsc_fatbin:
	.incbin NSC_FATBIN
nsc_fatbin_end:
	.size nsc_fatbin, nsc_fatbin_end - nsc_fatbin
	.balign 8
	.globl nsc_fatbin_size
	.hidden nsc_fatbin_size
	.type nsc_fatbin_size, @object
nsc_fatbin_size:
	.quad nsc_fatbin_end - nsc_fatbin
	.size nsc_fatbin_size, 8

	.section .rodata.nsc_kernels_src,"a",@progbits
	.globl nsc_kernels_src
	.hidden nsc_kernels_src
	.type nsc_kernels_src, @object
nsc_kernels_src:
	.incbin NSC_KERNELS_RTC
	.byte 0
nsc_kernels_src_end:
	.size nsc_kernels_src, nsc_kernels_src_end - nsc_kernels_src

	.section .note.GNU-stack,"",@progbits
