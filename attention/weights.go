package attention

import (
	"strings"

	"kvwin/gguf"
)

// bitsPerWeight is the average storage of one weight in a GGUF file of each
// file type (ggml.FileType.String names). Plain block formats are exact
// (Q4_0 stores 32 weights in 18 bytes: 4.5 bits). The K-quant mixes keep some
// tensors at higher precision, so their figures are whole-file averages as
// llama.cpp's quantize tool reports them for Llama-class models; they are
// within a few percent for other architectures.
var bitsPerWeight = map[string]float64{
	"F32":    32,
	"F16":    16,
	"BF16":   16,
	"Q8_0":   8.5,
	"Q6_K":   6.5625,
	"Q5_1":   6,
	"Q5_0":   5.5,
	"Q5_K_M": 5.69,
	"Q5_K_S": 5.54,
	"Q4_1":   5,
	"Q4_0":   4.5,
	"Q4_K_M": 4.85,
	"Q4_K_S": 4.58,
	"Q3_K_L": 4.27,
	"Q3_K_M": 3.91,
	"Q3_K_S": 3.5,
	"Q2_K":   3.35,
	"Q2_K_S": 3.0,
}

// BitsPerWeight returns the average bits one weight takes in a file of the
// given GGUF file type, and whether the type is known. Unknown types report
// 16 (f16), the usual unquantized export, so estimates err large.
func BitsPerWeight(fileType string) (float64, bool) {
	b, ok := bitsPerWeight[strings.ToUpper(fileType)]
	if !ok {
		return 16, false
	}
	return b, true
}

// EstimateWeightBytes estimates the bytes of s's weights from its parameter
// count and file type. The exact figure is the sum of the tensor sizes in
// the file (about the file's size, less a few megabytes of metadata); use
// that where it is at hand, as PlanConfig.WeightBytes allows.
func EstimateWeightBytes(s gguf.Shape) uint64 {
	b, _ := BitsPerWeight(s.FileType)
	return uint64(float64(s.Params) * b / 8)
}
