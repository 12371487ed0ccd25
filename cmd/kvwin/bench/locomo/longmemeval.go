package locomo

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// LongMemEval's instance format (Wu et al., "LongMemEval: Benchmarking Chat
// Assistants on Long-Term Interactive Memory", ICLR 2025;
// github.com/xiaowu0162/LongMemEval, data on Hugging Face): one chat
// history (haystack sessions of user/assistant turns) per question, the
// turns that hold the answer marked has_answer. Some copies hold several
// questions per history ("questions", "answers" and one answer_session_ids
// list per question); only the first has turn labels there.
type lmeInstance struct {
	QuestionID   string          `json:"question_id"`
	QuestionType string          `json:"question_type"`
	Question     string          `json:"question"`
	Questions    []string        `json:"questions"`
	Answer       json.RawMessage `json:"answer"`
	Sessions     [][]lmeTurn     `json:"haystack_sessions"`
	Dates        []string        `json:"haystack_dates"`
}

type lmeTurn struct {
	Role      string `json:"role"`
	Content   string `json:"content"`
	HasAnswer bool   `json:"has_answer"`
}

// lmeCategory maps a LongMemEval question type to a LoCoMo category:
// 1 multi-hop, 2 temporal, 4 single-hop; abstention questions (an id
// ending in _abs) are 5, which the recall bench skips (they have no
// evidence by design).
func lmeCategory(id, typ string) int {
	switch {
	case strings.HasSuffix(id, "_abs"):
		return 5
	case typ == "multi-session":
		return 1
	case typ == "temporal-reasoning":
		return 2
	}
	return 4
}

// FromLongMemEval reads a LongMemEval file (a JSON array of instances) and
// returns one LoCoMo sample per instance: speaker_a "user" and speaker_b
// "assistant", session i+1 its i-th haystack session, each turn's dia_id
// D<session>:<turn>, and one question whose evidence is the turns marked
// has_answer. An instance with no marked turn keeps its question with no
// evidence: the recall bench counts it as skipped.
func FromLongMemEval(r io.Reader) ([]json.RawMessage, error) {
	var in []lmeInstance
	if err := json.NewDecoder(r).Decode(&in); err != nil {
		return nil, fmt.Errorf("longmemeval: decode (want an array of instances): %w", err)
	}
	out := make([]json.RawMessage, 0, len(in))
	for i, x := range in {
		q := x.Question
		if q == "" && len(x.Questions) > 0 {
			q = x.Questions[0]
		}
		if q == "" || len(x.Sessions) == 0 {
			return nil, fmt.Errorf("longmemeval: instance %d (%q): no question or no sessions", i, x.QuestionID)
		}
		conv := map[string]any{"speaker_a": "user", "speaker_b": "assistant"}
		var evidence []string
		for s, sess := range x.Sessions {
			turns := make([]map[string]string, 0, len(sess))
			for t, turn := range sess {
				id := fmt.Sprintf("D%d:%d", s+1, t+1)
				turns = append(turns, map[string]string{"speaker": turn.Role, "dia_id": id, "text": turn.Content})
				if turn.HasAnswer {
					evidence = append(evidence, id)
				}
			}
			conv[fmt.Sprintf("session_%d", s+1)] = turns
			if s < len(x.Dates) {
				conv[fmt.Sprintf("session_%d_date_time", s+1)] = x.Dates[s]
			}
		}
		answer := x.Answer
		if len(answer) == 0 {
			answer = json.RawMessage(`""`)
		}
		sample := map[string]any{
			"sample_id":    x.QuestionID,
			"conversation": conv,
			"qa": []map[string]any{{"question": q, "answer": answer, "evidence": evidence,
				"category": lmeCategory(x.QuestionID, x.QuestionType)}},
		}
		b, err := json.Marshal(sample)
		if err != nil {
			return nil, fmt.Errorf("longmemeval: instance %d: %w", i, err)
		}
		out = append(out, b)
	}
	return out, nil
}
