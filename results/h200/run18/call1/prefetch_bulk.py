# The `_prefetch` helper call 1 ran (in fp8lab/kernels/quantize_onchip.py, with the plan's `prefetch`
# as committed after run18): one cp.async.bulk.prefetch.L2 per row of a part.
    @gluon.jit
    def _prefetch(X, stride_xr, item, geo, PART_ROWS: gl.constexpr, G: gl.constexpr, D: gl.constexpr,
                  VARLEN: gl.constexpr, NUM_WARPS: gl.constexpr):
        """Ask L2 for part `item` of x (cp.async.bulk.prefetch.L2, a row of G x D values per
        instruction; nothing lands in shared memory): `_issue`'s TMA load of it later finds it there."""
        _, g, _, _, row0, left = _part(item, geo, PART_ROWS, VARLEN)
        if left > 0:
            rows = gl.arange(0, PART_ROWS, layout=gl.BlockedLayout([max(1, PART_ROWS // (32 * NUM_WARPS))], [32],
                                                                   [NUM_WARPS], [0]))
            row = row0 + gl.minimum(rows, left - 1)
            at = X + row.to(gl.int64) * stride_xr + g * G * D
            size = gl.full([PART_ROWS], G * D * X.dtype.element_ty.primitive_bitwidth // 8, gl.int32,
                           layout=rows.type.layout)
            gl.inline_asm_elementwise("cp.async.bulk.prefetch.L2.global [$1], $2;\n\tmov.u32 $0, 0;", "=r,l,r",
                                      [at.to(gl.int64, bitcast=True), size], dtype=gl.int32, is_pure=False, pack=1)
