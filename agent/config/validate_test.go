package config

import (
	"strings"
	"testing"
)

// Every validation rule, each with the exact message an operator sees. The base is a valid
// config; each case appends TOML (later sections and [[devices]] entries) or replaces it.
func TestValidationErrors(t *testing.T) {
	const base = "[agent]\ngateway_id = \"gw\"\n[upstream]\nurl = \"mqtt://127.0.0.1:1883\"\n" // lines 1-4
	const brokerBase = "[agent]\ngateway_id = \"gw\"\n[broker]\n"                              // lines 1-3
	tests := []struct {
		name string
		src  string
		want string
	}{
		// [agent]
		{"gateway id missing", "[upstream]\nurl = \"mqtt://h:1\"\n", "f.toml: agent.gateway_id: required"},
		{"gateway id missing with broker and devices", "[broker]\n[[devices]]\nid = \"a\"\n",
			"f.toml: agent.gateway_id: required (only a config with nothing but [broker] may leave it out)"},
		{"gateway id with slash", "[agent]\ngateway_id = \"gw/1\"\n[broker]\n",
			`f.toml:2: agent.gateway_id: "gw/1": use 1 to 64 of A-Z a-z 0-9 . _ - (it becomes a topic level)`},
		{"gateway id too long", "[agent]\ngateway_id = \"" + strings.Repeat("g", 65) + "\"\n[broker]\n",
			`f.toml:2: agent.gateway_id: "` + strings.Repeat("g", 65) + `": use 1 to 64 of A-Z a-z 0-9 . _ - (it becomes a topic level)`},
		{"data dir empty", base + "[agent]\n", "f.toml:5: "}, // duplicate table: a syntax error
		{"data dir empty (inline)", "[agent]\ngateway_id = \"gw\"\ndata_dir = \"\"\n[broker]\n", "f.toml:3: agent.data_dir: must not be empty"},
		{"gomemlimit too small", "[agent]\ngateway_id = \"gw\"\ngomemlimit = \"1MiB\"\n[broker]\n",
			"f.toml:3: agent.gomemlimit: 1048576 bytes is too small (at least 4MiB, or 0 to leave it to GOMEMLIMIT)"},
		{"shutdown timeout zero", "[agent]\ngateway_id = \"gw\"\nshutdown_timeout = \"0s\"\n[broker]\n",
			"f.toml:3: agent.shutdown_timeout: must be positive"},

		// [broker]
		{"listen without port", brokerBase + "listen = \"127.0.0.1\"\n",
			`f.toml:4: broker.listen: "127.0.0.1": want host:port (address 127.0.0.1: missing port in address)`},
		{"listen port out of range", brokerBase + "listen = \"127.0.0.1:70000\"\n",
			`f.toml:4: broker.listen: "127.0.0.1:70000": port must be a number 0..65535`},
		{"tls cert without key", brokerBase + "tls_cert = \"c.pem\"\n", "f.toml:3: broker.tls_key: required with broker.tls_cert"},
		{"tls key without cert", brokerBase + "tls_key = \"k.pem\"\n", "f.toml:3: broker.tls_cert: required with broker.tls_key"},
		{"client ca without tls", brokerBase + "tls_client_ca = \"ca.pem\"\nusers_file = \"u\"\n",
			"f.toml:4: broker.tls_client_ca: needs tls_cert and tls_key: client certificates are checked only on a TLS listener"},
		{"nobody can connect", brokerBase + "allow_anonymous = false\n",
			"f.toml:4: broker.allow_anonymous: false, but no users_file or tls_client_ca: no client could connect"},
		{"negative max clients", brokerBase + "max_clients = -1\n", "f.toml:4: broker.max_clients: -1 is less than 1"},
		{"max connecting zero", brokerBase + "max_connecting = 0\n", "f.toml:4: broker.max_connecting: 0 is less than 1"},
		{"message expiry not whole seconds", brokerBase + "max_message_expiry = \"1500ms\"\n",
			"f.toml:4: broker.max_message_expiry: 1.5s is not 0 or a whole number of seconds from 1s to 136y (the MQTT 5 Maximum Message Expiry)"},
		{"negative queued", brokerBase + "max_queued_messages = -5\n", "f.toml:4: broker.max_queued_messages: -5 is less than 0"},
		{"subscriptions zero", brokerBase + "max_subscriptions = 0\n",
			"f.toml:4: broker.max_subscriptions: 0 is out of range (1..2147483647)"},
		{"pending write bytes tiny", brokerBase + "max_pending_write_bytes = 100\n",
			"f.toml:4: broker.max_pending_write_bytes: 100 bytes is too small (at least 1KiB; there is no unlimited)"},
		{"retained bytes zero", brokerBase + "max_retained_bytes = 0\n",
			"f.toml:4: broker.max_retained_bytes: 0 bytes is too small (at least 1KiB; there is no unlimited)"},
		{"session under packet size", brokerBase + "max_session_bytes = \"512KiB\"\n",
			"f.toml:4: broker.max_session_bytes: 524288 bytes is less than max_packet_size (1048576): a message that large could be published but never queued for a subscriber"},
		{"queued under session", brokerBase + "max_queued_bytes = \"2MiB\"\n",
			"f.toml:4: broker.max_queued_bytes: 2097152 bytes is less than max_session_bytes (4194304): no session could fill its share"},
		{"negative store keys", brokerBase + "store_max_keys = -1\n", "f.toml:4: broker.store_max_keys: -1 is less than 0"},
		{"receive maximum zero", brokerBase + "receive_maximum = 0\n",
			"f.toml:4: broker.receive_maximum: 0 is out of range (1..65535, MQTT5 Receive Maximum)"},
		{"server keep alive zero", brokerBase + "server_keep_alive = \"0s\"\n",
			"f.toml:4: broker.server_keep_alive: 0s is out of range (1s..18h12m15s, MQTT5 Server Keep Alive)"},
		{"server keep alive too long", brokerBase + "server_keep_alive = \"19h\"\n",
			"f.toml:4: broker.server_keep_alive: 19h0m0s is out of range (1s..18h12m15s, MQTT5 Server Keep Alive)"},
		{"server keep alive fraction", brokerBase + "server_keep_alive = \"1500ms\"\n",
			"f.toml:4: broker.server_keep_alive: 1.5s is not a whole number of seconds (MQTT5 Server Keep Alive)"},
		{"packet size tiny", brokerBase + "max_packet_size = 100\n",
			"f.toml:4: broker.max_packet_size: 100 bytes is too small (at least 1KiB, or 0 for the protocol's limit)"},
		{"store value size zero", brokerBase + "store_max_value_size = 0\n", "f.toml:4: broker.store_max_value_size: must be positive"},
		{"store value over packet", brokerBase + "max_packet_size = \"64KiB\"\nstore_max_value_size = \"1MiB\"\n",
			"f.toml:5: broker.store_max_value_size: 1048576 bytes exceeds max_packet_size (65536): such values could never be sent"},
		{"store value over store bytes", brokerBase + "store_max_bytes = \"64KiB\"\nstore_max_value_size = \"128KiB\"\n",
			"f.toml:5: broker.store_max_value_size: 131072 bytes exceeds store_max_bytes (65536): such values could never be stored"},
		{"store bytes tiny", brokerBase + "store_max_bytes = 1000\nstore_max_value_size = 100\n",
			"f.toml:4: broker.store_max_bytes: 1000 bytes is too small (at least 64KiB)"},
		{"store key size zero", brokerBase + "store_max_key_size = 0\n",
			"f.toml:4: broker.store_max_key_size: 0 bytes is out of range (1..16KiB: a notification's topic carries the key in hex, and MQTT bounds a topic at 65,535 bytes)"},
		{"store key size huge", brokerBase + "store_max_key_size = \"1MiB\"\n",
			"f.toml:4: broker.store_max_key_size: 1048576 bytes is out of range (1..16KiB: a notification's topic carries the key in hex, and MQTT bounds a topic at 65,535 bytes)"},
		{"store notify zero", brokerBase + "store_max_notify = 0\n", "f.toml:4: broker.store_max_notify: 0 is less than 1"},

		// [upstream]
		{"no upstream no broker", "[agent]\ngateway_id = \"gw\"\n[[devices]]\nid = \"a\"\n",
			"f.toml: upstream: missing: the agent needs [upstream] url or an embedded [broker]"},
		{"upstream url missing", "[agent]\ngateway_id = \"gw\"\n[upstream]\nusername = \"u\"\n",
			"f.toml:3: upstream.url: required (leave [upstream] out to use the embedded [broker])"},
		{"upstream url missing with broker", "[agent]\ngateway_id = \"gw\"\n[broker]\n[upstream]\nusername = \"u\"\n",
			"f.toml:4: upstream.url: required (leave [upstream] out to use the embedded [broker])"},
		{"upstream bad scheme", "[agent]\ngateway_id = \"gw\"\n[upstream]\nurl = \"http://h:1\"\n",
			`f.toml:4: upstream.url: scheme "http" is not supported (use mqtt:// or mqtts://)`},
		{"upstream no host", "[agent]\ngateway_id = \"gw\"\n[upstream]\nurl = \"mqtt://:1883\"\n",
			`f.toml:4: upstream.url: "mqtt://:1883" has no host`},
		{"upstream unparsable", "[agent]\ngateway_id = \"gw\"\n[upstream]\nurl = \"mqtt://h:x:y\"\n",
			`f.toml:4: upstream.url: parse "mqtt://h:x:y": invalid port ":y" after host`},
		{"upstream tls on plain url", base + "tls_ca = \"ca.pem\"\n",
			`f.toml:4: upstream.url: TLS settings are set but "mqtt://127.0.0.1:1883" is not a TLS url (use mqtts://)`},
		{"upstream cert without key", "[agent]\ngateway_id = \"gw\"\n[upstream]\nurl = \"mqtts://h:8883\"\ntls_cert = \"c\"\n",
			"f.toml:3: upstream.tls_key: required with upstream.tls_cert"},
		{"password without user", base + "password_env = \"PW\"\n",
			"f.toml:3: upstream.username: required when a password is set\nf.toml:5: upstream.password_env: environment variable PW is not set"},
		{"password file and env", base + "username = \"u\"\npassword_file = \"/nonexistent\"\npassword_env = \"PW\"\n",
			"f.toml:7: upstream.password_env: set either upstream.password_file or upstream.password_env, not both"},
		{"password file missing", base + "username = \"u\"\npassword_file = \"/nonexistent/pw\"\n",
			"f.toml:6: upstream.password_file: open /nonexistent/pw: no such file or directory"},
		{"bad client id", base + "client_id = \"a b\"\n", `f.toml:5: upstream.client_id: "a b": use at most 128 of A-Z a-z 0-9 . _ -`},
		{"keepalive too short", base + "keepalive = \"100ms\"\n", "f.toml:5: upstream.keepalive: 100ms is out of range (1s..18h12m15s)"},
		{"connect timeout zero", base + "connect_timeout = \"0s\"\n", "f.toml:5: upstream.connect_timeout: must be positive"},
		{"session expiry huge", base + "session_expiry = \"100000d\"\n",
			"f.toml:5: upstream.session_expiry: 2400000h0m0s is beyond MQTT's limit of 2^32-1 seconds"},
		{"reconnect max zero", base + "reconnect_max = \"0s\"\n", "f.toml:5: upstream.reconnect_max: must be positive"},

		// [dispatch]
		{"retry interval zero", base + "[dispatch]\nretry_interval = \"0s\"\n", "f.toml:6: dispatch.retry_interval: must be positive"},
		{"heartbeat timeout zero", base + "[dispatch]\nheartbeat_timeout = \"0s\"\n", "f.toml:6: dispatch.heartbeat_timeout: must be positive"},
		{"failed retention negative", base + "[dispatch]\nfailed_retention = \"-1h\"\n", `f.toml:6: dispatch.failed_retention: negative duration "-1h"`},
		{"failed retention zero", base + "[dispatch]\nfailed_retention = \"0s\"\n", "f.toml:6: dispatch.failed_retention: must be positive"},
		{"max tries zero", base + "[dispatch]\nmax_tries = 0\n", "f.toml:6: dispatch.max_tries: 0 is out of range (1..1000)"},
		{"max tries huge", base + "[dispatch]\nmax_tries = 5000\n", "f.toml:6: dispatch.max_tries: 5000 is out of range (1..1000)"},
		{"backoff below retry", base + "[dispatch]\nretry_interval = \"1m\"\n",
			"f.toml:5: dispatch.backoff_max: 30s is less than retry_interval (1m0s)"},
		{"queue per device zero", base + "[dispatch]\nmax_queue_per_device = 0\n", "f.toml:6: dispatch.max_queue_per_device: must be at least 1"},
		{"max batch zero", base + "[dispatch]\nmax_batch = 0\n", "f.toml:6: dispatch.max_batch: 0 is out of range (1..1000; 1 turns batches off)"},
		{"max batch huge", base + "[dispatch]\nretry_interval = \"1s\"\nmax_batch = 1001\n", "f.toml:7: dispatch.max_batch: 1001 is out of range (1..1000; 1 turns batches off)"},
		{"queue total below per device", base + "[dispatch]\nmax_queue_total = 10\n",
			"f.toml:6: dispatch.max_queue_total: 10 is less than max_queue_per_device (10000)"},

		// [intake] and [intake.http]
		{"max batch zero", base + "[intake]\nmax_batch = 0\n", "f.toml:6: intake.max_batch: 0 is out of range (1..100000)"},
		{"message size tiny", base + "[intake]\nmax_message_size = 10\n", "f.toml:6: intake.max_message_size: 10 bytes is too small (at least 1KiB)"},
		{"deadletters zero", base + "[intake]\nmax_deadletters = 0\n", "f.toml:6: intake.max_deadletters: 0 is out of range (max_batch..16777216)"},
		{"deadletters huge", base + "[intake]\nmax_deadletters = 20000000\n", "f.toml:6: intake.max_deadletters: 20000000 is out of range (max_batch..16777216)"},
		{"deadletters below max batch", base + "[intake]\nmax_batch = 100\nmax_deadletters = 99\n",
			"f.toml:7: intake.max_deadletters: 99 is less than max_batch (100): a message whose tasks are all refused could never be taken"},
		{"deadletters below default max batch", base + "[intake]\nmax_deadletters = 10\n",
			"f.toml:6: intake.max_deadletters: 10 is less than max_batch (1000): a message whose tasks are all refused could never be taken"},
		{"deadletter bytes tiny", base + "[intake]\nmax_deadletter_bytes = 100\n",
			"f.toml:6: intake.max_deadletter_bytes: 100 bytes is out of range (max_message_size..1GiB)"},
		{"deadletter bytes huge", base + "[intake]\nmax_deadletter_bytes = \"2GiB\"\n",
			"f.toml:6: intake.max_deadletter_bytes: 2147483648 bytes is out of range (max_message_size..1GiB)"},
		{"deadletter bytes below message size", base + "[intake]\nmax_message_size = \"64KiB\"\nmax_deadletter_bytes = \"32KiB\"\n",
			"f.toml:7: intake.max_deadletter_bytes: 32768 bytes is less than max_message_size (65536): the deadletter of a large message could never be taken"},
		{"http url missing", base + "[intake.http]\npage_size = 5\n", "f.toml:5: intake.http.url: required"},
		{"http url not http", base + "[intake.http]\nurl = \"ftp://h/x\"\n", `f.toml:6: intake.http.url: "ftp://h/x": must be an http:// or https:// url`},
		{"http url no host", base + "[intake.http]\nurl = \"http:///x\"\n", `f.toml:6: intake.http.url: "http:///x" has no host`},
		{"results url bad", base + "[intake.http]\nurl = \"http://h/x\"\nresults_url = \"h/r\"\n",
			`f.toml:7: intake.http.results_url: "h/r": must be an http:// or https:// url`},
		{"page size zero", base + "[intake.http]\nurl = \"http://h/x\"\npage_size = 0\n", "f.toml:7: intake.http.page_size: 0 is out of range (1..10000)"},
		{"page over max batch", base + "[intake]\nmax_batch = 10\n[intake.http]\nurl = \"http://h/x\"\npage_size = 20\n",
			"f.toml:9: intake.http.page_size: 20 is more than intake.max_batch (10): a page is taken as one batch"},
		{"interval zero", base + "[intake.http]\nurl = \"http://h/x\"\ninterval = \"0s\"\n", "f.toml:7: intake.http.interval: must be positive"},
		{"timeout zero", base + "[intake.http]\nurl = \"http://h/x\"\ntimeout = \"0s\"\n", "f.toml:7: intake.http.timeout: must be positive"},
		{"auth value without header", base + "[intake.http]\nurl = \"http://h/x\"\nauth_header = \"\"\nauth_value_file = \"/nonexistent\"\n",
			"f.toml:7: intake.http.auth_header: must name a header when an auth value is set\nf.toml:8: intake.http.auth_value_file: open /nonexistent: no such file or directory"},
		{"auth header with colon", base + "[intake.http]\nurl = \"http://h/x\"\nauth_header = \"Authorization: Bearer\"\n",
			`f.toml:7: intake.http.auth_header: "Authorization: Bearer" is not a header name`},

		// [faces]
		{"faces budget small", base + "[faces]\nmax_bytes = \"512KiB\"\n", "f.toml:6: faces.max_bytes: 524288 bytes is out of range (1MiB..1TiB)"},
		{"serial chunk past a frame", base + "[faces]\nchunk_serial = \"8KiB\"\n", "f.toml:6: faces.chunk_serial: 8192 bytes is out of range (1..4347: a chunk must fit one serial frame)"},
		{"mqtt chunk zero", base + "[faces]\nchunk_mqtt = 0\n", "f.toml:6: faces.chunk_mqtt: 0 bytes is out of range (1..65536)"},
		{"faces budget not a size", base + "[faces]\nmax_bytes = \"lots\"\n", `f.toml:6: faces.max_bytes: invalid size "lots" (write e.g. "64MiB" or a number of bytes)`},
		// [whitelist]
		{"whitelist terminals zero", base + "[whitelist]\nmax_terminals = 0\n", "f.toml:6: whitelist.max_terminals: 0 is out of range (1..65536)"},
		{"whitelist persons huge", base + "[whitelist]\nmax_persons = 10000001\n", "f.toml:6: whitelist.max_persons: 10000001 is out of range (1..10000000)"},
		{"whitelist records negative", base + "[whitelist]\nmax_records = -1\n", "f.toml:6: whitelist.max_records: -1 is out of range (1..100000000)"},
		{"set tasks zero", base + "[whitelist]\nmax_set_tasks = 0\n", "f.toml:6: whitelist.max_set_tasks: 0 is out of range (1..65536)"},
		{"set tasks huge", base + "[whitelist]\nmax_set_tasks = 65537\n", "f.toml:6: whitelist.max_set_tasks: 65537 is out of range (1..65536)"},
		{"reconciling zero", base + "[whitelist]\nmax_reconciling = 0\n", "f.toml:6: whitelist.max_reconciling: 0 is out of range (1..1024)"},
		{"reconcile backoff zero", base + "[whitelist]\nbackoff_base = \"0s\"\n", "f.toml:6: whitelist.backoff_base: must be positive"},
		{"reconcile backoff max below base", base + "[whitelist]\nbackoff_base = \"1m\"\nbackoff_max = \"30s\"\n",
			"f.toml:7: whitelist.backoff_max: 30s is less than whitelist.backoff_base (1m0s)"},
		{"reconcile step timeout zero", base + "[whitelist]\nstep_timeout = \"0s\"\n", "f.toml:6: whitelist.step_timeout: must be positive"},
		{"list limit huge", base + "[whitelist]\nlist_limit = 1001\n", "f.toml:6: whitelist.list_limit: 1001 is out of range (1..1000)"},
		{"sync reports zero", base + "[reports]\nmax_sync_reports = 0\n", "f.toml:6: reports.max_sync_reports: 0 is out of range (1..16777216)"},
		{"sync report bytes small", base + "[reports]\nmax_sync_report_bytes = \"1B\"\n", "f.toml:6: reports.max_sync_report_bytes: 1 bytes is out of range (1KiB..1GiB)"},
		{"forwarded zero", base + "[reports]\nmax_forwarded = 0\n", "f.toml:6: reports.max_forwarded: 0 is out of range (1..16777216)"},
		{"forwarded negative", base + "[reports]\nmax_forwarded = -3\n", "f.toml:6: reports.max_forwarded: -3 is out of range (1..16777216)"},
		{"forwarded huge", base + "[reports]\nmax_forwarded = 16777217\n", "f.toml:6: reports.max_forwarded: 16777217 is out of range (1..16777216)"},
		{"forwarded bytes tiny", base + "[reports]\nmax_forwarded_bytes = \"1000B\"\n",
			"f.toml:6: reports.max_forwarded_bytes: 1000 bytes is out of range (1KiB..1GiB)"},
		{"forwarded bytes huge", base + "[reports]\nmax_forwarded_bytes = \"1TiB\"\n",
			"f.toml:6: reports.max_forwarded_bytes: 1099511627776 bytes is out of range (1KiB..1GiB)"},

		// [store], [topics], [log], [metrics]
		{"store write interval zero", base + "[store]\nwrite_interval = \"0s\"\n", "f.toml:6: store.write_interval: must be positive"},
		{"store timeout zero", base + "[store]\nrequest_timeout = \"0s\"\n", "f.toml:6: store.request_timeout: must be positive"},
		{"topic without id", base + "[topics]\ndevice_command = \"dev/face\"\n", `f.toml:6: topics.device_command: "dev/face" must contain {id} exactly once`},
		{"topic with wildcard", base + "[topics]\ndevice_ack = \"dev/+/{id}\"\n", `f.toml:6: topics.device_ack: "dev/+/{id}" must not contain MQTT wildcards`},
		{"topic other placeholder", base + "[topics]\ndevice_ack = \"{gw}/{id}\"\n", `f.toml:6: topics.device_ack: "{gw}/{id}": {id} is the only placeholder`},
		{"topic empty level", base + "[topics]\ndevice_heartbeat = \"dev//{id}\"\n", `f.toml:6: topics.device_heartbeat: "dev//{id}" has an empty topic level`},
		{"topics equal", base + "[topics]\ndevice_ack = \"dev/face/{id}\"\n", `f.toml:6: topics.device_ack: "dev/face/{id}" is the same topic as topics.device_command`},
		{"log level", base + "[log]\nlevel = \"verbose\"\n", `f.toml:6: log.level: "verbose": must be one of debug, info, warn, error`},
		{"log format", base + "[log]\nformat = \"xml\"\n", `f.toml:6: log.format: "xml": must be one of text, json`},
		{"metrics listen", base + "[metrics]\nlisten = \"9108\"\n", `f.toml:6: metrics.listen: "9108": want host:port (address 9108: missing port in address)`},
		{"metrics idle timeout zero", base + "[metrics]\nidle_timeout = \"0s\"\n", "f.toml:6: metrics.idle_timeout: must be positive"},
		{"metrics read header timeout zero", base + "[metrics]\nread_header_timeout = \"0s\"\n", "f.toml:6: metrics.read_header_timeout: must be positive"},
		{"metrics header bytes tiny", base + "[metrics]\nmax_header_bytes = 100\n", "f.toml:6: metrics.max_header_bytes: 100 bytes is out of range (1KiB..1MiB)"},
		{"metrics no connections", base + "[metrics]\nmax_connections = 0\n", "f.toml:6: metrics.max_connections: 0 is less than 1"},

		// [ui]
		{"ui listen", base + "[ui]\nlisten = \"8080\"\n", `f.toml:6: ui.listen: "8080": want host:port (address 8080: missing port in address)`},
		{"ui token without page", base + "[ui]\ntoken_file = \"/nonexistent/t\"\n", "f.toml:6: ui.token_file: set, but ui.listen is empty: the page is off"},
		{"ui token file missing", base + "[ui]\nlisten = \"127.0.0.1:0\"\ntoken_file = \"/nonexistent/t\"\n",
			"f.toml:7: ui.token_file: open /nonexistent/t: no such file or directory"},
		{"ui on a broker alone", "[broker]\n[ui]\nlisten = \"127.0.0.1:0\"\n",
			"f.toml:3: ui.listen: the page shows the gateway's terminals: a config with only [broker] has none"},

		// [[devices]]
		{"device id missing", base + "[[devices]]\ntransport = \"mqtt\"\n", "f.toml:5: devices[0].id: required"},
		{"device id bad", base + "[[devices]]\nid = \"a#b\"\n", `f.toml:6: devices[0].id: "a#b": use 1 to 64 of A-Z a-z 0-9 . _ - (it becomes a topic level)`},
		{"device id duplicate", base + "[[devices]]\nid = \"a\"\n[[devices]]\nid = \"b\"\n[[devices]]\nid = \"a\"\n",
			`f.toml:10: devices[2].id: "a" is already used by devices[0].id`},
		{"transport unknown", base + "[[devices]]\nid = \"a\"\ntransport = \"zigbee\"\n", `f.toml:7: devices[0].transport: "zigbee": must be "mqtt" or "serial"`},
		{"serial field on mqtt", base + "[[devices]]\nid = \"a\"\nbaud = 9600\nparity = \"odd\"\n",
			"f.toml:7: devices[0].baud: only used with transport = \"serial\"\nf.toml:8: devices[0].parity: only used with transport = \"serial\""},
		{"serial port twice", base + "[[devices]]\nid = \"a\"\ntransport = \"serial\"\nport = \"/dev/ttyS1\"\n[[devices]]\nid = \"b\"\ntransport = \"serial\"\nport = \"/dev/ttyS1\"\n",
			`f.toml:12: devices[1].port: "/dev/ttyS1" is already used by devices[0].port: a serial line carries one terminal`},
		{"serial without port", base + "[[devices]]\nid = \"a\"\ntransport = \"serial\"\n",
			`f.toml:5: devices[0].port: required with transport = "serial" (e.g. "/dev/ttyS1")`},
		{"serial bad line settings", base + "[[devices]]\nid = \"a\"\ntransport = \"serial\"\nport = \"/dev/ttyS1\"\nbaud = 0\ndata_bits = 9\nparity = \"bogus\"\nstop_bits = 3\n",
			"f.toml:9: devices[0].baud: 0 is out of range (50..4000000)\n" +
				"f.toml:10: devices[0].data_bits: 9 is out of range (5..8)\n" +
				`f.toml:11: devices[0].parity: "bogus": must be one of none, even, odd, mark, space` + "\n" +
				"f.toml:12: devices[0].stop_bits: 3: must be 1 or 2"},
		{"serial face chunk past a frame", base + "[[devices]]\nid = \"a\"\ntransport = \"serial\"\nport = \"/dev/ttyS1\"\nface_chunk = \"8KiB\"\n",
			`f.toml:9: devices[0].face_chunk: 8192 bytes is out of range (1..4347 for transport "serial", or leave it out to use [faces])`},
		{"mqtt face chunk too large", base + "[[devices]]\nid = \"a\"\nface_chunk = \"2MiB\"\n",
			`f.toml:7: devices[0].face_chunk: 2097152 bytes is out of range (1..65536 for transport "mqtt", or leave it out to use [faces])`},
		{"device max tries", base + "[[devices]]\nid = \"a\"\nmax_tries = -1\n",
			"f.toml:7: devices[0].max_tries: -1 is out of range (1..1000, or leave it out to use [dispatch])"},
		{"heartbeat timeout without heartbeat", base + "[[devices]]\nid = \"a\"\nheartbeat = false\nheartbeat_timeout = \"5s\"\n",
			"f.toml:8: devices[0].heartbeat_timeout: has no effect with heartbeat = false"},
		{"device retry over backoff", base + "[[devices]]\nid = \"a\"\nretry_interval = \"5m\"\n",
			"f.toml:7: devices[0].retry_interval: 5m0s is more than dispatch.backoff_max (30s)"},
		{"too many devices", base + strings.Repeat("[[devices]]\n", MaxDevices+1),
			"f.toml:5: devices: 4097 devices; at most 4096 per gateway"}, // the first [[devices]] line
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("f.toml", []byte(tt.src), testOpts)
			if err == nil {
				t.Fatalf("accepted:\n%s", tt.src)
			}
			got := err.Error()
			if strings.HasSuffix(tt.want, ": ") {
				if !strings.HasPrefix(got, tt.want) {
					t.Fatalf("got\n%s\nwant prefix\n%s", got, tt.want)
				}
				return
			}
			if got != tt.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

// max_clients = 0 once meant unlimited; it now means the default, so a config written for
// an earlier release still starts.
func TestMaxClientsZeroIsTheDefault(t *testing.T) {
	c, err := Parse("f.toml", []byte("[broker]\nmax_clients = 0\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Broker.MaxClients != defaultBroker.MaxClients {
		t.Errorf("max_clients = 0 became %d, want the default %d", c.Broker.MaxClients, defaultBroker.MaxClients)
	}
}

// A small board's [broker] bounds are the defaults where the board is named; a key in the
// file wins over the board's.
func TestBoardBrokerBounds(t *testing.T) {
	c, err := Parse("b.toml", []byte("[agent]\ngateway_id = \"g\"\nboard = \"imx6ull-armv7\"\n[broker]\nmax_session_bytes = \"3MiB\"\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	b := c.Broker
	if b.MaxClients != 44 || b.MaxPendingWriteBytes != 32<<10 || b.MaxQueuedBytes != 4<<20 || b.MaxRetainedBytes != 1<<20 || b.MaxInboundBytes != 4<<20 {
		t.Errorf("imx6ull-armv7's bounds not applied: %+v", *b)
	}
	if b.MaxSessionBytes != 3<<20 {
		t.Errorf("max_session_bytes %d, want the file's 3MiB", b.MaxSessionBytes)
	}
	c, err = Parse("b.toml", []byte("[agent]\ngateway_id = \"g\"\nboard = \"rpi3-armv7\"\n[broker]\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := *c.Broker
	got.AllowAnonymous = nil // resolved by Parse
	if got != *DefaultBroker() {
		t.Errorf("rpi3-armv7 (256 MiB soft limit) changed the defaults: %+v", got)
	}
}

// The report backlogs' bounds are read as written: counts, and sizes with units or in bytes.
func TestReportBacklogBounds(t *testing.T) {
	c, err := Parse("f.toml", []byte("[agent]\ngateway_id = \"gw\"\n[broker]\n[intake]\nmax_batch = 10\nmax_message_size = \"1KiB\"\n"+
		"max_deadletters = 10\nmax_deadletter_bytes = \"1KiB\"\n[reports]\nmax_forwarded = 1\nmax_forwarded_bytes = 2048\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Intake.MaxDeadLetters != 10 || c.Intake.MaxDeadLetterBytes != 1<<10 || c.Reports.MaxForwarded != 1 || c.Reports.MaxForwardedBytes != 2048 {
		t.Errorf("bounds read as %+v %+v", c.Intake, c.Reports)
	}
	for _, c := range []struct{ src, want string }{
		{"[intake]\nmax_deadletter_bytes = \"4 megs\"\n", `f.toml:5: intake.max_deadletter_bytes: invalid size "4 megs" (write e.g. "64MiB" or a number of bytes)`},
		{"[reports]\nmax_forwarded_bytes = -1\n", `f.toml:5: reports.max_forwarded_bytes: invalid size "-1" (write e.g. "64MiB" or a number of bytes)`},
		{"[reports]\nmax_results = 5\n", "f.toml:5: reports.max_results: unknown key"},
	} {
		_, err := Parse("f.toml", []byte("[agent]\ngateway_id = \"gw\"\n[broker]\n"+c.src), nil)
		if err == nil || err.Error() != c.want {
			t.Errorf("%q: %v, want %s", c.src, err, c.want)
		}
	}
}
