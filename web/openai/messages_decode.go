package openai

import (
	"encoding/json"

	"kvwin/web/core"
)

// messageList is a request's messages, decoded by a fast path for what
// nearly every client sends (objects of a role and a content, nothing
// else) and by encoding/json otherwise (core's scanner says why). The fast
// path gives exactly what encoding/json gives for what it accepts
// (FuzzMessageListAsDecoded); anything else - another field, an escaped
// role, a key spelled in another case - is decoded by encoding/json,
// errors included.
type messageList []chatMessage

func (l *messageList) UnmarshalJSON(b []byte) error {
	if out, ok := fastMessages(b); ok {
		*l = out
		return nil
	}
	var out []chatMessage
	if err := json.Unmarshal(b, &out); err != nil {
		return err
	}
	*l = out
	return nil
}

// fastMessages reads b as an array of objects whose keys are "role" (a
// string without escapes) and "content" (any string, null, array or
// object, kept raw as encoding/json keeps a RawMessage). ok is false for
// anything else, and for anything that is not valid JSON: b need not have
// been checked (DecodeFast). Content aliases b, the request body, which
// lives as long as the request.
func fastMessages(b []byte) (messageList, bool) {
	out, end, ok := fastMessagesAt(b, core.SkipSpace(b, 0))
	return out, ok && core.SkipSpace(b, end) == len(b)
}

// fastMessagesAt is fastMessages for the array at b[i] of a body: it
// returns the offset after it (core.ScanObjectsAt).
func fastMessagesAt(b []byte, i int) (messageList, int, bool) {
	out := make(messageList, 0, core.ObjectsHint(b, i))
	end, ok := core.ScanObjectsAt(b, i, func() { out = append(out, chatMessage{}) }, func(key, value []byte) bool {
		m := &out[len(out)-1]
		switch string(key) {
		case "role":
			role, ok := core.PlainString(value)
			m.Role = core.Role(role)
			return ok
		case "content":
			m.Content = json.RawMessage(value)
			return true
		}
		return false
	})
	if !ok {
		return nil, 0, false
	}
	return out, end, true
}

// DecodeFast decodes a chat completion body without encoding/json's
// reflective decode of its messages (core.FastDecoder): fastMessages reads
// the top-level messages value, encoding/json the rest. false, r
// untouched, for anything else. FuzzDecodeFastAsDecoded holds it to
// encoding/json's result.
func (r *chatRequest) DecodeFast(body []byte) bool {
	return core.DecodeMessages(body, r, fastMessagesAt, func(r *chatRequest) *messageList { return &r.Messages })
}
