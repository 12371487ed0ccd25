package wire

import (
	"context"
	"log/slog"
)

// RequestIDKey is the attribute a log line carries the request id under.
const RequestIDKey = "request_id"

// LogHandler is a slog.Handler that adds the request id of the context a line
// is logged with (Logger.InfoContext, LogAttrs) as the attribute RequestIDKey, and
// hands the line to the handler it wraps. Lines logged without a context
// carrying an id are passed on unchanged. Safe for concurrent use if the
// wrapped handler is.
type LogHandler struct {
	next slog.Handler
}

var _ slog.Handler = LogHandler{}

// NewLogHandler wraps next.
func NewLogHandler(next slog.Handler) LogHandler { return LogHandler{next: next} }

// Enabled reports whether next logs at level.
func (h LogHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// Handle adds the id, then passes r to next.
func (h LogHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := RequestIDFrom(ctx); id != "" {
		r = r.Clone() // a record's attributes may be shared with other handlers
		r.AddAttrs(slog.String(RequestIDKey, id))
	}
	return h.next.Handle(ctx, r)
}

// WithAttrs wraps next.WithAttrs.
func (h LogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return LogHandler{next: h.next.WithAttrs(attrs)}
}

// WithGroup wraps next.WithGroup. The id of a line logged through a group
// lands inside the group, as every attribute added to its record does.
func (h LogHandler) WithGroup(name string) slog.Handler {
	return LogHandler{next: h.next.WithGroup(name)}
}
