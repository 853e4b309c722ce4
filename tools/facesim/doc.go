// Command facesim runs simulated face terminals (package device/sim) for the agent to talk
// to: over MQTT, on an external broker or on an embedded broker it starts itself, or
// over serial lines, on real ports or on pseudo-terminals it creates. It prints a live
// per-terminal summary and, with -strict, fails loudly when the one-command-in-flight rule
// is broken.
//
// # Tutorial
//
// Three terminals on an embedded broker, with slow and sometimes lost acks:
//
//	facesim -n 3 -ack-latency exp:80ms -ack-loss 0.05 -strict
//	# point the agent at mqtt://127.0.0.1:1883 with devices sim-1, sim-2, sim-3
//
// The same against a mosquitto that is already running, with offline periods:
//
//	facesim -url mqtt://127.0.0.1:1883 -devices 2042253,2042254 -offline-every 1m -offline-for 10s
//
// Two terminals on serial lines (pseudo-terminals), with stable names for the agent's config
// (transport = "serial", port = "/tmp/faceports/sim-1"), garbage and crashes:
//
//	mkdir -p /tmp/faceports
//	facesim -transport serial -n 2 -link-dir /tmp/faceports -garbage-rate 0.1 -crash-rate 0.01
//
// Faces and batches: with -batch the terminals take AddPersons of that many persons,
// -person-time makes each person take its time, and -cut-face cuts each face's first
// transfer (PutFace) after that many bytes, so that the agent must resume it. The summary
// counts the faces each terminal holds. On pseudo-terminals, -pace makes the line as slow
// as -baud says:
//
//	facesim -transport serial -n 1 -link-dir /tmp/faceports -pace -baud 115200 -batch 20 -cut-face 6000
//
// The terminals speak protocol v2 (revs, digest and serial in heartbeats, ListPersons);
// -protocol 1 makes them first-generation ones. With -stdin, commands typed while they run
// cause the drift whitelist sync repairs:
//
//	facesim -n 3 -capacity 1000 -stdin
//	reset sim-1            # factory reset: no persons, digest 0, same serial
//	replace sim-2          # a new terminal in its place: empty, new serial
//	delete sim-3 951       # a person deleted at the terminal
//	add sim-3 999          # a person added at the terminal, rev 0000000000000000
//	status                 # protocol, serial, digest, persons, capacity of each
//
// `facesim --help` documents every knob and command. Exit status: 0 clean stop (SIGINT/SIGTERM or
// -duration), 1 runtime failure, 2 bad usage, 3 strict-mode violations.
//
// # Caveats
//
//   - The embedded broker admits every client to every topic; it is for a laptop, not a
//     gateway.
//   - A pseudo-terminal does not enforce -baud; real ports do. -pace paces in software.
//   - -stdin reads standard input: do not combine it with running facesim in the
//     background of an interactive shell (a background job reading the terminal is stopped).
//   - The summary goes to stdout every -summary interval as a plain table (no screen
//     redrawing), so it can be piped or logged; logs go to stderr.
package main
