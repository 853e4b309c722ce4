package mqttlink

import (
	"fmt"
	"strings"

	"github.com/seed0e69bba5/faceagent/device/face"
)

// Default topic templates: the field report's (docs/design.md "The field report"), as
// docs/protocol.md "Topics" lists them.
const (
	DefaultCommandTopic   = "dev/face/{id}"
	DefaultAckTopic       = "dev/face/{id}/Ack"
	DefaultHeartbeatTopic = "dev/face/{id}/heartbeat"
)

// template is a topic with one "{id}" level, split around it.
type template struct {
	text, prefix, suffix string
}

func parseTemplate(name, s string) (template, error) {
	if strings.Count(s, "{id}") != 1 {
		return template{}, fmt.Errorf("%s topic %q: needs exactly one {id}", name, s)
	}
	if strings.ContainsAny(s, "+#\x00") {
		return template{}, fmt.Errorf("%s topic %q: no wildcards or NUL allowed", name, s)
	}
	i := strings.Index(s, "{id}")
	t := template{text: s, prefix: s[:i], suffix: s[i+len("{id}"):]}
	if (t.prefix != "" && !strings.HasSuffix(t.prefix, "/")) || (t.suffix != "" && !strings.HasPrefix(t.suffix, "/")) {
		return template{}, fmt.Errorf("%s topic %q: {id} must be a whole topic level", name, s)
	}
	return t, nil
}

// topic returns the topic of one terminal.
func (t template) topic(id string) string { return t.prefix + id + t.suffix }

// filter returns the subscription filter that matches every terminal.
func (t template) filter() string { return t.prefix + "+" + t.suffix }

// match returns the device id if topic is this template's topic for some terminal.
func (t template) match(topic string) (string, bool) {
	if len(topic) <= len(t.prefix)+len(t.suffix) || !strings.HasPrefix(topic, t.prefix) || !strings.HasSuffix(topic, t.suffix) {
		return "", false
	}
	id := topic[len(t.prefix) : len(topic)-len(t.suffix)]
	if strings.Contains(id, "/") {
		return "", false
	}
	return id, true
}

// validDeviceID reports whether id can stand in a topic level and is within the protocol's
// bound on ids.
func validDeviceID(id string) bool {
	return id != "" && len(id) <= face.MaxIDLen && !strings.ContainsAny(id, "/+#\x00")
}
