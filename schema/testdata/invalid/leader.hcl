service "a" {
  command = ["x"]
  leader {
    mode         = "active"    # ERROR: Invalid leader mode
    change_mode  = "command"   # ERROR: Invalid change_mode
    session_ttl  = "5s"        # ERROR: Invalid session_ttl
    lock_delay   = "2m"        # ERROR: Invalid lock_delay
    key          = "/abs"      # ERROR: Invalid leader key
    signal       = "BOGUS"     # ERROR: Unknown signal
  }
}

service "b" {
  command = ["x"]
  leader {
    mode         = "tag"
    tag          = "same"
    follower_tag = "same"      # ERROR: Invalid leader tag
    key          = "locks/shared"
  }
}

service "c" {
  command = ["x"]
  leader {                     # ERROR: Duplicate leader key
    key = "locks/shared"
  }
}
