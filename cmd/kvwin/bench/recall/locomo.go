// Package recall evaluates window policies offline: for each question of a
// conversation in LoCoMo's JSON format, it builds the window a server would
// send if the question were asked after the last turn, and measures how much
// of the question's evidence (and of its superseded, stale evidence) the
// window holds. Counting follows ../shared/data/README.md exactly.
package recall

import (
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Turn is one turn of a LoCoMo conversation.
type Turn struct {
	Speaker string `json:"speaker"`
	DiaID   string `json:"dia_id"`
	Text    string `json:"text"`
}

// Question is one qa entry, with its evidence resolved to turn indexes.
type Question struct {
	Question string
	Category int
	Evidence []int // indexes into Conversation.Turns
	Stale    []int
}

// Conversation is one LoCoMo sample: its turns in session order and the
// questions that count (category 5 and unresolvable ones are dropped).
type Conversation struct {
	ID                 string
	SpeakerA, SpeakerB string
	Turns              []Turn
	Questions          []Question
	Skipped            int // questions dropped by the counting conventions
}

type rawSample struct {
	SampleID     string                     `json:"sample_id"`
	Conversation map[string]json.RawMessage `json:"conversation"`
	QA           []struct {
		Question string          `json:"question"`
		Evidence json.RawMessage `json:"evidence"`
		Stale    json.RawMessage `json:"stale_evidence"`
		Category int             `json:"category"`
	} `json:"qa"`
}

var sessionKey = regexp.MustCompile(`^session_(\d+)$`)

// LoadLoCoMo reads a LoCoMo JSON file: an array of samples, or one sample.
func LoadLoCoMo(r io.Reader) ([]Conversation, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read locomo: %w", err)
	}
	var samples []rawSample
	if err := json.Unmarshal(data, &samples); err != nil {
		var one rawSample
		if err2 := json.Unmarshal(data, &one); err2 != nil {
			return nil, fmt.Errorf("decode locomo: %w", err)
		}
		samples = []rawSample{one}
	}
	var out []Conversation
	for i, s := range samples {
		c, err := convert(s)
		if err != nil {
			return nil, fmt.Errorf("locomo sample %d (%s): %w", i, s.SampleID, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("locomo: no conversations")
	}
	return out, nil
}

func convert(s rawSample) (Conversation, error) {
	c := Conversation{ID: s.SampleID}
	_ = unmarshalString(s.Conversation["speaker_a"], &c.SpeakerA)
	_ = unmarshalString(s.Conversation["speaker_b"], &c.SpeakerB)
	type session struct {
		n     int
		turns []Turn
	}
	var sessions []session
	for k, v := range s.Conversation {
		m := sessionKey.FindStringSubmatch(k)
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		var ts []Turn
		if err := json.Unmarshal(v, &ts); err != nil {
			return c, fmt.Errorf("%s: %w", k, err)
		}
		sessions = append(sessions, session{n, ts})
	}
	sort.Slice(sessions, func(i, j int) bool { return sessions[i].n < sessions[j].n })
	index := map[string]int{}
	for _, s := range sessions {
		for _, t := range s.turns {
			if strings.TrimSpace(t.Text) == "" {
				continue // an empty turn is not a message a client could send
			}
			if id, ok := normalID(t.DiaID); ok {
				index[id] = len(c.Turns)
			}
			if c.SpeakerA == "" {
				c.SpeakerA = t.Speaker
			}
			c.Turns = append(c.Turns, t)
		}
	}
	if len(c.Turns) == 0 {
		return c, fmt.Errorf("no turns")
	}
	for _, q := range s.QA {
		if q.Category == 5 {
			c.Skipped++
			continue
		}
		ev := resolve(evidenceIDs(q.Evidence), index)
		if len(ev) == 0 {
			c.Skipped++
			continue
		}
		c.Questions = append(c.Questions, Question{Question: q.Question, Category: q.Category,
			Evidence: ev, Stale: resolve(evidenceIDs(q.Stale), index)})
	}
	return c, nil
}

func unmarshalString(raw json.RawMessage, dst *string) error {
	if raw == nil {
		return nil
	}
	return json.Unmarshal(raw, dst)
}
