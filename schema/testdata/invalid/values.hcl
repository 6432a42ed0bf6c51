# Wrong types and out-of-range values.
service "types" {
  command = "python3 -m http.server" # ERROR: Incorrect attribute value type
  port    = 70000                     # ERROR: Port out of range
  tags    = "v1"                      # ERROR: Incorrect attribute value type
  env     = ["A=1"]                   # ERROR: Incorrect attribute value type
  meta    = { "managed-by" = "me" }   # ERROR: Reserved meta key
  version = ["1"]                     # ERROR: Incorrect attribute value type

  restart {
    attempts     = -1     # ERROR: Value out of range
    on_unhealthy = "yes"  # ERROR: Incorrect attribute value type
    grace        = 10     # ERROR: Invalid duration
    window       = "5 minutes" # ERROR: Invalid duration
    unhealthy_for = "-1s" # ERROR: Invalid duration
    delay        = "10"   # ERROR: Invalid duration
  }

  stop {
    signal  = "SIGTREM"   # ERROR: Unknown signal
    timeout = "1.5"       # ERROR: Invalid duration
    drain   = true        # ERROR: Invalid duration
  }
}

service "empty-command" {
  command = []            # ERROR: Empty command
  port    = -1            # ERROR: Port out of range
  meta    = { "a b" = "x", "consul-x" = "y" } # ERROR: Invalid meta key # ERROR: Invalid meta key
  env     = { "A=B" = "1" } # ERROR: Invalid environment variable

  stop {
    signal = 15           # ERROR: Unknown signal
  }
}

service "empty-argv0" {
  command = ["", "arg"]   # ERROR: Empty command
  port    = 1.5           # ERROR: Invalid number
  id      = "has space"   # ERROR: Invalid service ID
}

service "null-elements" {
  command = ["a", null]   # ERROR: Invalid list element
  env     = { A = null }  # ERROR: Invalid map element
}

service "nul-byte" {
  command = ["/bin/echo", "a\u0000b"] # ERROR: Invalid command
  check "script" {
    args = ["check", "\u0000"]        # ERROR: Invalid command
  }
}
