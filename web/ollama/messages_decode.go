package ollama

import (
	"strings"

	oapi "github.com/ollama/ollama/api"

	"kvwin/web/core"
)

// DecodeFast decodes an /api/chat body without encoding/json's decode of
// its messages (core.FastDecoder): a long conversation's body is mostly
// them, and api.Message's own UnmarshalJSON decodes each through a second
// encoding/json pass. Messages of a role and a content (strings, null
// content as none) are read by core's scanner, the rest of the body by
// encoding/json; anything else - images, tool calls, thinking, another
// shape - is decoded by encoding/json whole. The role is lowered, as
// api.Message's UnmarshalJSON lowers it. FuzzChatDecodeFastAsDecoded holds
// it to encoding/json's result.
func (b *ollamaChatBody) DecodeFast(body []byte) bool {
	return core.DecodeMessages(body, b, scanMessages, func(b *ollamaChatBody) *[]oapi.Message { return &b.Messages })
}

// scanMessages reads an /api/chat messages array of roles and string or
// null contents at raw[i] (core.ScanObjectsAt), and the offset after it.
func scanMessages(raw []byte, i int) ([]oapi.Message, int, bool) {
	msgs := make([]oapi.Message, 0, core.ObjectsHint(raw, i))
	end, ok := core.ScanObjectsAt(raw, i, func() { msgs = append(msgs, oapi.Message{}) }, func(key, value []byte) bool {
		m := &msgs[len(msgs)-1]
		if string(value) == "null" {
			return string(key) == "role" || string(key) == "content" // a string field keeps its value
		}
		var ok bool
		switch string(key) {
		case "role":
			var role []byte
			if role, ok = core.PlainString(value); ok {
				m.Role = core.Role(role)
				if m.Role != "user" && m.Role != "assistant" && m.Role != "system" && m.Role != "tool" {
					m.Role = strings.ToLower(m.Role)
				}
			}
		case "content":
			m.Content, ok = core.String(value)
		}
		return ok
	})
	return msgs, end, ok
}
