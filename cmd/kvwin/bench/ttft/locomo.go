package ttft

import (
	"fmt"
	"io"

	"kvwin/cmd/kvwin/bench/locomo"
)

// LoadLoCoMo reads a LoCoMo-format file (locomo.Read: an array of samples,
// or one sample) as one conversation. Within a sample, sessions are
// replayed in numeric order (session_2 before session_10); the sample's
// speaker_a (or, without it, the first turn's speaker) is the user and
// every other speaker the assistant. Samples are appended in file order,
// folded as the folder rule says. Questions and other fields are ignored.
func LoadLoCoMo(r io.Reader) (Conversation, error) {
	samples, err := locomo.Read(r)
	if err != nil {
		return Conversation{}, fmt.Errorf("ttft: %w", err)
	}
	var f folder
	for _, s := range samples {
		foldLoCoMo(&f, s)
	}
	c, err := f.conversation()
	if err != nil {
		return Conversation{}, fmt.Errorf("locomo: %w", err)
	}
	return c, nil
}

func foldLoCoMo(f *folder, s locomo.Sample) {
	f.begin()
	user := s.SpeakerA
	for _, t := range s.Turns {
		if user == "" {
			user = t.Speaker
		}
		role := roleAssistant
		if t.Speaker == user {
			role = roleUser
		}
		f.add(role, t.Text)
	}
}
