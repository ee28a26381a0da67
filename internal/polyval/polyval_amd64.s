//go:build amd64 && !purego

#include "textflag.h"

// The reduction constant x^57+x^62+x^63 in both qwords (see dot in polyval.go).
DATA reductionConst<>+0(SB)/8, $0xc200000000000000
DATA reductionConst<>+8(SB)/8, $0xc200000000000000
GLOBL reductionConst<>(SB), RODATA|NOPTR, $16

// Registers. X0: the running value (the rest of Z0 kept zero: it is XORed into a step's first
// four blocks). Z1-Z8: a step's blocks. Z9, Z10, Z11: the sums of the low, high and cross
// products. Z16-Z23: H^32..H^1, lane j of Z(16+i) being H^(32-4i-j). X14: the reduction
// constant. X15: H. Z24-Z27, X12, X13: temporaries.

// MULFIRST sets the sums to the four products of D's blocks and P's powers, lane by lane.
#define MULFIRST(D, P) \
	VPCLMULQDQ $0x00, P, D, Z9; \
	VPCLMULQDQ $0x11, P, D, Z10; \
	VPCLMULQDQ $0x01, P, D, Z24; \
	VPCLMULQDQ $0x10, P, D, Z25; \
	VPXORQ     Z25, Z24, Z11

// MULADD adds the four products of D's blocks and P's powers to the sums.
#define MULADD(D, P) \
	VPCLMULQDQ $0x00, P, D, Z24; \
	VPCLMULQDQ $0x11, P, D, Z25; \
	VPCLMULQDQ $0x01, P, D, Z26; \
	VPCLMULQDQ $0x10, P, D, Z27; \
	VPXORQ     Z24, Z9, Z9; \
	VPXORQ     Z25, Z10, Z10; \
	VPTERNLOGQ $0x96, Z27, Z26, Z11

// FOLD leaves in X0 the reduced sum of the products: the four lanes of each sum added (512 ->
// 256 -> 128 bits), the cross products split over low and high, then the Montgomery reduction
// (two divisions by x^64, as dot in polyval.go). Its last write is VEX: the rest of Z0 is
// cleared.
#define FOLD \
	VEXTRACTI64X4 $1, Z9, Y24; \
	VEXTRACTI64X4 $1, Z10, Y25; \
	VEXTRACTI64X4 $1, Z11, Y26; \
	VPXORQ        Y24, Y9, Y9; \
	VPXORQ        Y25, Y10, Y10; \
	VPXORQ        Y26, Y11, Y11; \
	VEXTRACTI128  $1, Y9, X12; \
	VPXOR         X12, X9, X9; \
	VEXTRACTI128  $1, Y10, X13; \
	VPXOR         X13, X10, X10; \
	VEXTRACTI128  $1, Y11, X12; \
	VPXOR         X12, X11, X11; \
	VPSLLDQ       $8, X11, X12; \
	VPSRLDQ       $8, X11, X13; \
	VPXOR         X12, X9, X9; \
	VPXOR         X13, X10, X10; \
	REDUCE

// REDUCE: X0 = X10:X9 * x^-128 mod P (X9 clobbered).
#define REDUCE \
	VPCLMULQDQ $0x00, X14, X9, X12; \
	VPSHUFD    $0x4e, X9, X9; \
	VPXOR      X12, X9, X9; \
	VPCLMULQDQ $0x00, X14, X9, X12; \
	VPSHUFD    $0x4e, X9, X9; \
	VPTERNLOGQ $0x96, X12, X10, X9; \
	VMOVDQA    X9, X0

// func updateAVX512(acc *elem, pow *[32]elem, p *byte, n int)
TEXT ·updateAVX512(SB), NOSPLIT, $0-32
	MOVQ acc+0(FP), DI
	MOVQ pow+8(FP), SI
	MOVQ p+16(FP), DX
	MOVQ n+24(FP), CX

	VMOVDQU (DI), X0 // a VEX load: the rest of Z0 is cleared
	VMOVDQU reductionConst<>(SB), X14
	VMOVDQU 496(SI), X15

	CMPQ CX, $16
	JB   single

	VMOVDQU64 0(SI), Z16
	VMOVDQU64 64(SI), Z17
	VMOVDQU64 128(SI), Z18
	VMOVDQU64 192(SI), Z19
	VMOVDQU64 256(SI), Z20
	VMOVDQU64 320(SI), Z21
	VMOVDQU64 384(SI), Z22
	VMOVDQU64 448(SI), Z23

	CMPQ CX, $32
	JB   half

wide:
	VMOVDQU64 0(DX), Z1
	VMOVDQU64 64(DX), Z2
	VMOVDQU64 128(DX), Z3
	VMOVDQU64 192(DX), Z4
	VMOVDQU64 256(DX), Z5
	VMOVDQU64 320(DX), Z6
	VMOVDQU64 384(DX), Z7
	VMOVDQU64 448(DX), Z8
	// The blocks that do not wait for the running value go first.
	MULFIRST(Z2, Z17)
	MULADD(Z3, Z18)
	MULADD(Z4, Z19)
	MULADD(Z5, Z20)
	MULADD(Z6, Z21)
	MULADD(Z7, Z22)
	MULADD(Z8, Z23)
	VPXORQ Z0, Z1, Z1
	MULADD(Z1, Z16)
	FOLD
	ADDQ $512, DX
	SUBQ $32, CX
	CMPQ CX, $32
	JAE  wide

	CMPQ CX, $16
	JB   single

half:
	VMOVDQU64 0(DX), Z1
	VMOVDQU64 64(DX), Z2
	VMOVDQU64 128(DX), Z3
	VMOVDQU64 192(DX), Z4
	MULFIRST(Z2, Z21)
	MULADD(Z3, Z22)
	MULADD(Z4, Z23)
	VPXORQ Z0, Z1, Z1
	MULADD(Z1, Z20)
	FOLD
	ADDQ $256, DX
	SUBQ $16, CX

single:
	TESTQ CX, CX
	JZ    done

one:
	VMOVDQU    (DX), X1
	VPXOR      X1, X0, X1
	VPCLMULQDQ $0x00, X15, X1, X9
	VPCLMULQDQ $0x11, X15, X1, X10
	VPCLMULQDQ $0x01, X15, X1, X11
	VPCLMULQDQ $0x10, X15, X1, X12
	VPXOR      X12, X11, X11
	VPSLLDQ    $8, X11, X12
	VPSRLDQ    $8, X11, X13
	VPXOR      X12, X9, X9
	VPXOR      X13, X10, X10
	REDUCE
	ADDQ       $16, DX
	DECQ       CX
	JNZ        one

done:
	VMOVDQU X0, (DI)
	VZEROUPPER
	RET
