package web

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"kvwin/web/core"
)

// Forgetter deletes a tenant's named conversation: its stored turns and the
// KV snapshots saved for it. It blocks on the stores and is safe for
// concurrent use.
type Forgetter interface {
	// Forget deletes the conversation and reports whether there was
	// anything to delete.
	Forget(ctx context.Context, tenant, conversation string) (bool, error)
}

// ForgetFunc adapts a function to Forgetter.
type ForgetFunc func(ctx context.Context, tenant, conversation string) (bool, error)

var _ Forgetter = ForgetFunc(nil)

// Forget calls f.
func (f ForgetFunc) Forget(ctx context.Context, tenant, conversation string) (bool, error) {
	return f(ctx, tenant, conversation)
}

// deleteConversation serves DELETE /kvwin/v1/conversations/{id}: 204 when
// the caller's tenant (the owner's key, or the admin key's ?tenant=) had the
// conversation, 404 when it did not, 503 when the memory store is
// unavailable (whatever else it held is deleted first). Another tenant's conversation of the
// same name is never touched: it is another conversation.
func (s *Server) deleteConversation(c *gin.Context, t *core.Turn) error {
	id := strings.TrimPrefix(c.Param("id"), "/")
	if id == "" {
		return core.BadInput(core.CodeInvalidValue, "id", "the conversation id must be 1 to %d bytes", core.MaxConversationBytes)
	}
	if err := core.CheckName("id", id, core.MaxConversationBytes); err != nil {
		return err
	}
	tenant := t.Tenant
	found, err := s.cfg.Forget.Forget(c.Request.Context(), tenant, id)
	if down := s.memoryDown(); err == nil && down != nil {
		// Its KV and snapshots went; its stored turns may be in a store that
		// cannot be opened. Never a 404: the text may still be on disk.
		s.log.WarnContext(c.Request.Context(), "conversation's stored turns not deleted: the memory store is unavailable",
			"tenant", tenant, "err", down)
		err = fmt.Errorf("%w: the conversation's stored turns cannot be deleted now; its cached KV was", core.ErrMemoryUnavailable)
	}
	if err != nil {
		return fmt.Errorf("delete conversation: %w", err)
	}
	if !found {
		return fmt.Errorf("%w: %q", core.ErrConversationNotFound, id)
	}
	s.log.InfoContext(c.Request.Context(), "conversation deleted", "tenant", tenant)
	c.Status(http.StatusNoContent)
	c.Writer.WriteHeaderNow()
	return nil
}
