package llamaserver

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"

	"kvwin/web/core"
)

// nodeLogitBias reads llama-server's logit_bias: [[token, bias], …] or
// {"token": bias}.
func nodeLogitBias(raw json.RawMessage) (map[string]float32, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var byKey map[string]float32
	if raw[0] == '{' {
		if err := json.Unmarshal(raw, &byKey); err != nil {
			return nil, core.BadInput(core.CodeInvalidType, "logit_bias", "logit_bias must map token ids to numbers")
		}
		return byKey, nil
	}
	var pairs [][2]float64
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, core.BadInput(core.CodeInvalidType, "logit_bias", "logit_bias must be [[token, bias], …] or {\"token\": bias}")
	}
	byKey = make(map[string]float32, len(pairs))
	for _, p := range pairs {
		if p[0] != math.Trunc(p[0]) {
			return nil, core.BadInput(core.CodeInvalidValue, "logit_bias", "logit_bias token %g is not an id", p[0])
		}
		byKey[strconv.FormatInt(int64(p[0]), 10)] = float32(p[1])
	}
	return byKey, nil
}
