package ttft

import (
	"encoding/json"
	"fmt"
	"io"
)

// shareGPTRoles maps ShareGPT's "from" values to chat roles. Besides
// human/gpt/system, dumps in the wild use the chat API's own names and the
// names of other assistants.
var shareGPTRoles = map[string]string{
	"system": roleSystem,
	"human":  roleUser, "user": roleUser,
	"gpt": roleAssistant, "assistant": roleAssistant, "chatgpt": roleAssistant,
	"bard": roleAssistant, "bing": roleAssistant,
}

type shareGPTEntry struct {
	ID            string `json:"id"`
	Conversations []struct {
		From  string `json:"from"`
		Value string `json:"value"`
	} `json:"conversations"`
}

// LoadShareGPT reads a ShareGPT-format file,
// [{"conversations": [{"from": "human"|"gpt"|"system", "value": …}]}], as
// one conversation: its chats appended in file order and folded as the
// folder rule says. ShareGPT chats are short, so a long replay is many of
// them in a row. An unknown "from" is an error naming the entry.
func LoadShareGPT(r io.Reader) (Conversation, error) {
	var entries []shareGPTEntry
	if err := json.NewDecoder(r).Decode(&entries); err != nil {
		return Conversation{}, fmt.Errorf("ttft: decode sharegpt (want [{\"conversations\": [...]}]): %w", err)
	}
	var f folder
	for i, e := range entries {
		f.begin()
		for j, m := range e.Conversations {
			role, ok := shareGPTRoles[m.From]
			if !ok {
				return Conversation{}, fmt.Errorf("ttft: sharegpt entry %d (%q) message %d: unknown \"from\" %q", i, e.ID, j, m.From)
			}
			f.add(role, m.Value)
		}
	}
	c, err := f.conversation()
	if err != nil {
		return Conversation{}, fmt.Errorf("sharegpt: %w", err)
	}
	return c, nil
}
