service "checks" {
  command = ["x"]

  check "none" {          # ERROR: Check has no kind
    interval = "5s"
  }

  check "two" {
    http = "http://127.0.0.1:8080/"
    tcp  = "127.0.0.1:8080" # ERROR: Check has several kinds
  }

  check "ttl" {
    ttl      = "30s"
    interval = "10s"        # ERROR: Not valid on a ttl check
    timeout  = "1s"         # ERROR: Not valid on a ttl check
  }

  check "ttl" {             # ERROR: Duplicate check name
    ttl = "30s"
  }

  check "zero-ttl" {
    ttl = "0s"              # ERROR: Invalid duration
  }

  check "bad-url" {
    http = "127.0.0.1:8080/health" # ERROR: Invalid check target
  }

  check "bad-tcp" {
    tcp = "localhost"       # ERROR: Invalid check target
  }

  check "path-no-port" {
    http = "/health"        # ERROR: Check needs the service's port
  }

  check "self-no-port" {
    tcp = ""                # ERROR: Check needs the service's port
  }

  check "bad-self-port" {
    tcp = ":99999"          # ERROR: Invalid check target
  }

  check "bad-path" {
    http = "//x/health"     # ERROR: Invalid check target
  }

  check "bad-grpc" {
    grpc = "127.0.0.1:99999/svc" # ERROR: Invalid check target
  }

  check "bad-args" {
    args = []               # ERROR: Empty command
  }

  check "bad-options" {
    http                     = "http://127.0.0.1/"
    interval                 = "0s"  # ERROR: Invalid duration
    timeout                  = 5     # ERROR: Invalid duration
    success_before_passing   = -2    # ERROR: Value out of range
    failures_before_critical = "many" # ERROR: Incorrect attribute value type
    deregister_critical_after = "10"  # ERROR: Invalid duration
  }

  check {                   # ERROR: Missing name for check
    ttl = "1s"
  }
}
