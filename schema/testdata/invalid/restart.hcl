service "a" {
  command = ["x"]
  restart {
    policy       = "on-falure"  # ERROR: Invalid restart policy
    delay        = "10s"
    max_delay    = "5s"         # ERROR: max_delay less than delay
    on_exhausted = "stop"       # ERROR: Invalid on_exhausted
  }
}

service "b" {
  command = ["x"]
  restart {
    delay = "2m"                # ERROR: max_delay less than delay
  }
}

service "c" {
  command = ["x"]
  restart {
    delay  = "-1s"              # ERROR: Invalid duration
    window = "0s"               # ERROR: Invalid duration
  }
  restart {}                    # ERROR: Duplicate restart block
}
