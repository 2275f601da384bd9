/* fatbin.S — embeds the CUDA kernels' fatbin (built by nvcc from kernels.cu,
 * or an empty file when nvcc is absent) as the hidden symbols nsc_fatbin and
 * nsc_fatbin_size, for cuModuleLoadData. NSC_FATBIN is the file's path as a
 * string literal, given by compress/module.mk.
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

	.section .note.GNU-stack,"",@progbits
