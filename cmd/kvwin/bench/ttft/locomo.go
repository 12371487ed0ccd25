package ttft

import (
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
)

// locomoSample is the part of a LoCoMo sample the harness reads: the
// speakers and the sessions, each a list of {speaker, dia_id, text}.
type locomoSample struct {
	SampleID     string                     `json:"sample_id"`
	Conversation map[string]json.RawMessage `json:"conversation"`
}

type locomoTurn struct {
	Speaker string `json:"speaker"`
	DiaID   string `json:"dia_id"`
	Text    string `json:"text"`
}

var locomoSession = regexp.MustCompile(`^session_(\d+)$`)

// LoadLoCoMo reads a LoCoMo-format file (an array of samples, or one
// sample) as one conversation. Within a sample, sessions are replayed in
// numeric order (session_2 before session_10); the sample's speaker_a (or,
// without it, the first turn's speaker) is the user and every other speaker
// the assistant. Samples are appended in file order, folded as the folder
// rule says. Questions and other fields are ignored.
func LoadLoCoMo(r io.Reader) (Conversation, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return Conversation{}, fmt.Errorf("ttft: read locomo: %w", err)
	}
	var samples []locomoSample
	if err := json.Unmarshal(data, &samples); err != nil {
		var one locomoSample
		if err2 := json.Unmarshal(data, &one); err2 != nil || one.Conversation == nil {
			return Conversation{}, fmt.Errorf("ttft: decode locomo (want an array of samples or one sample): %w", err)
		}
		samples = []locomoSample{one}
	}
	var f folder
	for i, s := range samples {
		if err := foldLoCoMo(&f, s); err != nil {
			return Conversation{}, fmt.Errorf("ttft: locomo sample %d (%q): %w", i, s.SampleID, err)
		}
	}
	c, err := f.conversation()
	if err != nil {
		return Conversation{}, fmt.Errorf("locomo: %w", err)
	}
	return c, nil
}

func foldLoCoMo(f *folder, s locomoSample) error {
	f.begin()
	var user string
	if raw, ok := s.Conversation["speaker_a"]; ok {
		if err := json.Unmarshal(raw, &user); err != nil {
			return fmt.Errorf("speaker_a: %w", err)
		}
	}
	type session struct {
		n     int
		turns []locomoTurn
	}
	var sessions []session
	for k, raw := range s.Conversation {
		m := locomoSession.FindStringSubmatch(k)
		if m == nil {
			continue // speaker_a, session_N_date_time, …
		}
		n, err := strconv.Atoi(m[1])
		if err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
		var ts []locomoTurn
		if err := json.Unmarshal(raw, &ts); err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
		sessions = append(sessions, session{n, ts})
	}
	sort.Slice(sessions, func(i, j int) bool { return sessions[i].n < sessions[j].n })
	for _, ss := range sessions {
		for _, t := range ss.turns {
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
	return nil
}
