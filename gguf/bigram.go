package gguf

import (
	_ "embed"
	"math"
	"sort"
	"strings"
)

// The test model writes text. Its weights are random, as a real model's
// compute needs, except where that would make its output bytes that are not
// text: the token embeddings and the output matrix carry byte-bigram
// statistics of a public-domain text (the opening of Tolstoy's War and
// Peace, Maude translation, as shipped in the pinned Ollama module's
// testdata), and the blocks' output projections are scaled down so the
// residual stream stays the current token's embedding. The model is then a
// bigram model of English running through real transformer blocks:
//
//   - every printable ASCII byte (and newline) the width allows gets a
//     dimension of its own (the most frequent first), plus one shared
//     "bias" dimension every token has;
//   - the output row of byte v holds log P(v | t) in t's dimension, so after
//     the final norm the logit of v following t is that log-probability;
//   - tokens that are not printable text (other bytes, the control tokens,
//     end-of-generation among them) get a large negative weight on the bias
//     dimension, so sampling never picks them unless a grammar forces it.

//go:embed tinytext.txt
var tinyText string

// tinyNotText is the logit a non-text token gets, far below any
// log-probability of the table (≥ log(α/(n+α·96)) ≈ −14).
const tinyNotText = -40

// blockOutputScale scales the blocks' output projections (attn_output,
// ffn_down) so what they add to the residual stream is small beside the
// token embedding: the blocks still cost what they cost, but do not turn
// the bigram logits into noise.
const blockOutputScale = 1.0 / 64

// bigram is the embedding and output weights of the text statistics.
type bigram struct {
	dim   map[int]int // byte → its own dimension (1…); absent: bias only
	logp  [256][256]float32
	print [256]bool
}

// printableByte reports whether b is text the test model may write.
func printableByte(b int) bool { return b == '\n' || (b >= ' ' && b <= '~') }

// newBigram counts the bigrams of tinyText for a model of width d. Line
// breaks inside a paragraph are spaces (the file is wrapped at 70 columns)
// and a paragraph break is one newline, so text flows as prose.
func newBigram(d int) *bigram {
	text := strings.ReplaceAll(tinyText, "\r", "")
	paras := strings.Split(text, "\n\n")
	for i, p := range paras {
		paras[i] = strings.Join(strings.Fields(p), " ")
	}
	text = strings.Join(paras, "\n")

	var count [256][256]float64
	var freq [256]int
	for i := 0; i+1 < len(text); i++ {
		count[text[i]][text[i+1]]++
		freq[text[i]]++
	}
	g := &bigram{dim: map[int]int{}}
	var byFreq []int
	for b := range 256 {
		g.print[b] = printableByte(b)
		if g.print[b] {
			byFreq = append(byFreq, b)
		}
	}
	sort.SliceStable(byFreq, func(i, j int) bool { return freq[byFreq[i]] > freq[byFreq[j]] })
	for i, b := range byFreq {
		if i+1 >= d {
			break
		}
		g.dim[b] = i + 1
	}
	// Add-α smoothing over the printable bytes only: every printable byte
	// may follow any other, nothing else may.
	const alpha = 0.1
	n := float64(len(byFreq))
	for _, t := range byFreq {
		var sum float64
		for _, v := range byFreq {
			sum += count[t][v]
		}
		for _, v := range byFreq {
			g.logp[t][v] = float32(math.Log((count[t][v] + alpha) / (sum + alpha*n)))
		}
	}
	return g
}

// embedding returns token tok's row of token_embd (width d): 1 on the bias
// dimension and 1 on the byte's own dimension, if it has one.
func (g *bigram) embedding(tok, d int) []float32 {
	row := make([]float32, d)
	row[0] = 1
	if k, ok := g.dim[tok]; ok && tok < 256 {
		row[k] = 1
	}
	return row
}

// output returns token v's row of output.weight (width d). After the final
// RMS norm a byte with its own dimension reads √(d/2) on it and on the bias
// dimension, so the weights are divided by that to give log-probabilities.
func (g *bigram) output(v, d int) []float32 {
	row := make([]float32, d)
	s := float32(math.Sqrt(float64(d) / 2))
	if v >= 256 || !g.print[v] {
		row[0] = tinyNotText / s
		return row
	}
	for t, k := range g.dim {
		row[k] = g.logp[t][v] / s
	}
	return row
}
