package canary

import (
	"fmt"
	"unicode/utf8"
)

// Bounds of the text meshwave writes: an Event's message, and the status
// reason (annotations share 256 KiB per object).
const (
	maxEventMessage = 1024
	maxReason       = 4096
)

// Bounds of the other free text in the status: a wave of maxMembers
// members with its failures, verdicts, exclusions and warnings stays well
// under the 256 KiB an object's annotations share, whatever the apiserver
// or a check answered.
const (
	maxItemReason = 200
	maxNote       = 512
)

// boundText cuts every free-text field of the status to its bound.
func (s *Status) boundText() {
	s.Reason = cut(s.Reason, maxReason)
	for i := range s.Workloads {
		s.Workloads[i].Reason = cut(s.Workloads[i].Reason, maxItemReason)
	}
	for i := range s.Failures {
		s.Failures[i].Reason = cut(s.Failures[i].Reason, maxNote)
	}
	for i := range s.Skipped {
		s.Skipped[i].Reason = cut(s.Skipped[i].Reason, maxItemReason)
	}
	for i := range s.Unmovable {
		s.Unmovable[i].Reason = cut(s.Unmovable[i].Reason, maxItemReason)
	}
	for i := range s.Warnings {
		s.Warnings[i] = cut(s.Warnings[i], maxNote)
	}
	for i := range s.Verdicts {
		v := &s.Verdicts[i]
		v.Reason = cut(v.Reason, maxNote)
		v.Failed = append([]WorkloadState(nil), v.Failed...) // the gates' own verdicts stay whole
		for j := range v.Failed {
			v.Failed[j].Reason = cut(v.Failed[j].Reason, maxItemReason)
		}
	}
}

// cut shortens s to at most n bytes, on a rune boundary, saying how long it
// was.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	note := fmt.Sprintf("… (%d bytes)", len(s))
	end := n - len(note)
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end] + note
}
