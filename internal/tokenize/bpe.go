package tokenize

import "math"

// The merge loops below are tiktoken-go's (codec/codec.go, MIT), over table instead of the
// library's map: BPE merges, again and again, the adjacent pair whose concatenation has the
// lowest rank, leftmost first among equals, until no pair is a token. Scratch slices come from
// the caller so a Count of many pieces allocates them once.

const noRank = math.MaxUint32

// mergeHeapThreshold is the piece length from which merge switches from the O(n²) scan to the
// O(n log n) heap, as in the library.
const mergeHeapThreshold = 96

// scratch holds the merge loops' buffers between pieces; all pointer-free.
type scratch struct {
	parts []part
	nodes []mergeNode
	heap  mergeHeap
	bound []int32 // the result: part start offsets, then len(piece)
}

type part struct {
	offset int32
	rank   uint32
}

// merge splits piece into its BPE tokens and returns their start offsets followed by
// len(piece), in sc.bound.
func (t *table) merge(piece string, sc *scratch) []int32 {
	if len(piece) < mergeHeapThreshold {
		return t.mergeScan(piece, sc)
	}
	return t.mergeHeap(piece, sc)
}

func (t *table) mergeScan(piece string, sc *scratch) []int32 {
	parts := sc.parts[:0]
	for i := range len(piece) + 1 {
		parts = append(parts, part{int32(i), noRank})
	}
	getRank := func(index, skip int) uint32 {
		if index+skip+2 < len(parts) {
			if r, ok := t.rank(piece[parts[index].offset:parts[index+skip+2].offset]); ok {
				return r
			}
		}
		return noRank
	}
	for i := 0; i < len(parts)-2; i++ {
		parts[i].rank = getRank(i, 0)
	}
	for len(parts) > 1 {
		minRank, minIndex := uint32(noRank), 0
		for i, p := range parts[:len(parts)-1] {
			if p.rank < minRank {
				minRank, minIndex = p.rank, i
			}
		}
		if minRank == noRank {
			break
		}
		parts[minIndex].rank = getRank(minIndex, 1)
		if minIndex > 0 {
			parts[minIndex-1].rank = getRank(minIndex-1, 1)
		}
		parts = append(parts[:minIndex+1], parts[minIndex+2:]...)
	}
	sc.parts = parts
	b := sc.bound[:0]
	for _, p := range parts {
		b = append(b, p.offset)
	}
	sc.bound = b
	return b
}

// mergeNode is a part boundary in mergeHeap's doubly linked list; rank is that of the token this
// part and the next would merge into.
type mergeNode struct {
	prev, next int32
	rank       uint32
}

func (t *table) mergeHeap(piece string, sc *scratch) []int32 {
	n := int32(len(piece))
	nodes := sc.nodes[:0]
	for i := range n + 1 {
		nodes = append(nodes, mergeNode{prev: i - 1, next: i + 1, rank: noRank})
	}
	nodes[n].next = -1
	rankOf := func(i int32) uint32 {
		j := nodes[i].next
		if j < 0 {
			return noRank
		}
		k := nodes[j].next
		if k < 0 {
			return noRank
		}
		if r, ok := t.rank(piece[i:k]); ok {
			return r
		}
		return noRank
	}
	cand := sc.heap[:0]
	for i := int32(0); i+2 <= n; i++ {
		if r := rankOf(i); r != noRank {
			nodes[i].rank = r
			cand = append(cand, mergeCandidate{r, i})
		}
	}
	cand.init()
	for len(cand) > 0 {
		top := cand.pop()
		i := top.offset
		if nodes[i].rank != top.rank {
			continue
		}
		j := nodes[i].next
		k := nodes[j].next
		nodes[j].rank = noRank
		nodes[i].next = k
		if k >= 0 {
			nodes[k].prev = i
		}
		for _, b := range [2]int32{i, nodes[i].prev} {
			if b < 0 {
				continue
			}
			nodes[b].rank = rankOf(b)
			if nodes[b].rank != noRank {
				cand.push(mergeCandidate{nodes[b].rank, b})
			}
		}
	}
	b := sc.bound[:0]
	for i := int32(0); i >= 0; i = nodes[i].next {
		b = append(b, i)
	}
	sc.nodes, sc.heap, sc.bound = nodes, cand, b
	return b
}

type mergeCandidate struct {
	rank   uint32
	offset int32
}

// mergeHeap is a binary min-heap ordered by rank, then offset, so the leftmost of equal ranks
// merges first.
type mergeHeap []mergeCandidate

func (h mergeHeap) less(a, b int) bool {
	if h[a].rank != h[b].rank {
		return h[a].rank < h[b].rank
	}
	return h[a].offset < h[b].offset
}

func (h mergeHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *mergeHeap) push(c mergeCandidate) {
	*h = append(*h, c)
	h.up(len(*h) - 1)
}

func (h *mergeHeap) pop() mergeCandidate {
	old := *h
	top := old[0]
	last := len(old) - 1
	old[0] = old[last]
	*h = old[:last]
	h.down(0)
	return top
}

func (h mergeHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (h mergeHeap) down(i int) {
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if r := c + 1; r < len(h) && h.less(r, c) {
			c = r
		}
		if !h.less(c, i) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}
