package openai

import (
	"encoding/base64"
	"encoding/binary"
	"math"
	"testing"
)

func TestBase64FloatsIsLittleEndianFloat32(t *testing.T) {
	v := []float32{1, -0.5, float32(math.Pi)}
	raw, err := base64.StdEncoding.DecodeString(base64Floats(v))
	if err != nil || len(raw) != 12 {
		t.Fatalf("%d bytes, %v", len(raw), err)
	}
	for i, want := range v {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])); got != want {
			t.Errorf("float %d = %g, want %g", i, got, want)
		}
	}
}
