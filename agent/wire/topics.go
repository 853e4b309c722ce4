package wire

// Topics are the upstream topics of one gateway: the back office publishes tasks, the
// agent publishes results, deadletters, under Devices + "{id}/ack" and "{id}/heartbeat"
// what the terminals said, and under Devices + "{id}/sync" its whitelist sync reports.
type Topics struct {
	Tasks, Results, DeadLetter string
	Devices                    string // prefix, ends in "/"; also the device state keys' prefix
}

// GatewayTopics returns the topics of gateway gw: faceagent/{gw}/tasks and so on.
func GatewayTopics(gw string) Topics {
	p := "faceagent/" + gw + "/"
	return Topics{Tasks: p + "tasks", Results: p + "results", DeadLetter: p + "deadletter", Devices: p + "devices/"}
}

// DeviceSync is the topic of terminal id's sync reports, faceagent/{gw}/devices/{id}/sync;
// DeviceSync("+") is the filter for every terminal's.
func (t Topics) DeviceSync(id string) string { return t.Devices + id + "/sync" }
