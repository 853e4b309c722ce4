// Package boards holds one profile per supported ARM gateway board — the build target and the
// runtime defaults that suit the board's CPU, RAM and storage — embedded from boards/*.toml.
//
// The agent config names a board (`board = "rpi4-arm64"` under [agent]); agent/config looks the
// profile up and uses its fields as defaults that explicit keys override. The Makefile reads the
// same profiles (through boards/cmd/boardenv) to decide what `make cross` and `make dist` build.
//
// # Tutorial
//
//	p, err := boards.Lookup("rpi3-armv7")
//	if err != nil {
//		return err // wraps ErrUnknownBoard and lists boards.Names()
//	}
//	debug.SetMemoryLimit(p.GOMEMLIMIT)   // unless GOMEMLIMIT is set in the environment
//	dataDir := p.DataDir                 // unless the config says otherwise
//	switch p.JournalSync {               // SyncAlways, SyncBatch (+ p.JournalBatchWindow), SyncNone
//	}
//
// # Profile file format
//
// TOML, flat but for the optional [broker], [faces] and [intake] tables; every key is required except goarm (required with goarch = "arm" only),
// serial_ports (may be empty) and journal_batch_window (required with journal_sync = "batch"
// only). Unknown keys are errors.
//
//	description          = "one line"
//	goos                 = "linux"
//	goarch               = "arm"            # arm, arm64 (amd64, riscv64 accepted)
//	goarm                = "7"              # 5, 6, 7
//	qemu_cpu             = "cortex-a7"      # qemu -cpu model the tests run the binaries on
//	ram                  = "512MiB"         # smallest RAM the profile is sized for
//	serial_ports         = ["/dev/serial0"]
//	gomemlimit           = "128MiB"         # GOMEMLIMIT syntax; 32 MiB ≤ it ≤ ram/2
//	journal_sync         = "batch"          # always | batch | none
//	journal_batch_window = "20ms"           # (0, 1s]
//	data_dir             = "/var/lib/faceagent"
//	store_max_bytes      = "8MiB"           # optional: [broker] store_max_bytes; ≤ gomemlimit/4
//
//	[broker]                                # optional, each key too: bounds of the embedded
//	max_clients             = 48            # broker smaller than the defaults (sized for a
//	max_pending_write_bytes = "32KiB"       # 256 MiB soft limit), for a board whose
//	max_session_bytes       = "2MiB"        # gomemlimit is lower; positive; the agent
//	max_queued_bytes        = "4MiB"        # config's [broker] keys of the same names win
//	max_retained_bytes      = "1MiB"
//	max_inbound_bytes       = "4MiB"
//
//	[faces]                                 # optional: the face store's disk budget for a
//	max_bytes = "256MiB"                    # board with little storage; at least 1 MiB
//
//	[intake]                                # optional: the most persons of one
//	max_whitelist = 4000                    # SetWhitelist, for a board with little memory;
//	                                        # 1..10,000,000; the agent config's key wins
//
// # Choosing a journal sync policy
//
// SD cards (Raspberry Pi) get "batch": an fsync there costs 10–50 ms and wears the card, so
// appends arriving within the window share one fsync. eMMC boards (i.MX6ULL, RK356x) get
// "always": an fsync costs about a millisecond. Both are durable — an append returns only after
// the fsync covering it — "batch" only trades a little latency for far fewer flash writes.
// "none" is for tmpfs and tests.
//
// # Caveats
//
//   - A profile describes the smallest board of its family (RAM, storage). A 1 GB i.MX6ULL or a
//     Pi 5 booting from NVMe runs fine on it but may raise gomemlimit or choose "always" in its
//     agent config.
//   - GOMEMLIMIT is a soft limit: the Go GC works harder near it but never fails an allocation.
//     The systemd unit's MemoryMax is the hard limit.
//   - Profiles are embedded at build time; editing boards/*.toml needs a rebuild.
package boards
