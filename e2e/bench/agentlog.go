package bench

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// logLine is one line of the agent's klog text output: when the agent
// wrote it, its message and its key/value pairs, as strings.
type logLine struct {
	at  time.Time
	msg string
	kv  map[string]string
}

// klogHeader matches klog's text header: severity, month and day, time
// to the microsecond, thread, file:line.
var klogHeader = regexp.MustCompile(`^[IWEF](\d{4} \d{2}:\d{2}:\d{2}\.\d{6})\s+\d+ [^\]]+\] (.*)$`)

// parseLogLine reads a klog text line of a structured message: "msg"
// then key=value pairs, a value quoted as Go quotes strings or bare.
// The header has no year: it is year's.
func parseLogLine(line string, year int) (logLine, error) {
	m := klogHeader.FindStringSubmatch(line)
	if m == nil {
		return logLine{}, fmt.Errorf("not a klog line: %q", line)
	}
	at, err := time.ParseInLocation("0102 15:04:05.000000", m[1], time.Local)
	if err != nil {
		return logLine{}, err
	}
	out := logLine{at: at.AddDate(year, 0, 0), kv: map[string]string{}}
	rest := m[2]
	quoted, err := strconv.QuotedPrefix(rest)
	if err != nil {
		return logLine{}, fmt.Errorf("no quoted message in %q", line)
	}
	out.msg, _ = strconv.Unquote(quoted)
	rest = rest[len(quoted):]
	for rest = strings.TrimLeft(rest, " "); rest != ""; rest = strings.TrimLeft(rest, " ") {
		key, after, ok := strings.Cut(rest, "=")
		if !ok || strings.ContainsAny(key, " \"") {
			return logLine{}, fmt.Errorf("no key=value at %q in %q", rest, line)
		}
		if strings.HasPrefix(after, `"`) {
			quoted, err := strconv.QuotedPrefix(after)
			if err != nil {
				return logLine{}, fmt.Errorf("unterminated value of %s in %q", key, line)
			}
			out.kv[key], _ = strconv.Unquote(quoted)
			rest = after[len(quoted):]
			continue
		}
		value, tail, _ := strings.Cut(after, " ")
		out.kv[key], rest = value, tail
	}
	return out, nil
}

// agentLog keeps the lines of an agent's log whose message is one of
// those asked for, as they come.
type agentLog struct {
	mu    sync.Mutex
	keep  map[string]bool
	lines []logLine
}

func newAgentLog(messages ...string) *agentLog {
	l := &agentLog{keep: map[string]bool{}}
	for _, m := range messages {
		l.keep[m] = true
	}
	return l
}

// read parses r to its end, copying every line to raw. A line that is not
// a structured klog line (a multi-line value's continuation) is skipped.
func (l *agentLog) read(r io.Reader, raw io.Writer) {
	year := time.Now().Year()
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 64<<10), 4<<20)
	for s.Scan() {
		_, _ = fmt.Fprintln(raw, s.Text())
		line, err := parseLogLine(s.Text(), year)
		if err != nil || !l.keep[line.msg] {
			continue
		}
		l.mu.Lock()
		l.lines = append(l.lines, line)
		l.mu.Unlock()
	}
}

// snapshot returns the lines kept so far, in the order they were logged.
func (l *agentLog) snapshot() []logLine {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]logLine(nil), l.lines...)
}
