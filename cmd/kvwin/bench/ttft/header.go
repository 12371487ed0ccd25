package ttft

import "kvwin/engine/wire"

// Headers the runner sends and reads (docs/architecture.md, "Headers"; package wire).
const (
	headerPolicy       = wire.HeaderWindowPolicy // request: the policy of this request
	headerWindow       = wire.HeaderWindow
	headerPromptTokens = wire.HeaderPromptTokens
	headerCachedTokens = wire.HeaderCachedTokens
	headerPromptMs     = wire.HeaderPromptMs
)

// WindowState is the X-Kvwin-Window response header (wire.Window).
type WindowState = wire.Window

// ParseWindowState parses the header leniently (wire.ParseWindow).
func ParseWindowState(v string) WindowState { return wire.ParseWindow(v) }
