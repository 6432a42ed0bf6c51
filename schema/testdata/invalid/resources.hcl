# Resources, limits, umask.
service "limits" {
  command = ["a"]
  umask   = "7777"          # ERROR: Invalid perms
  no_new_privs = "maybe"    # ERROR: Incorrect attribute value type
  resources {
    cpu        = 0          # ERROR: Value out of range
    memory     = 256
    memory_max = 128        # ERROR: memory_max below memory
    pids       = "many"     # ERROR: Incorrect attribute value type
    disk       = 10         # ERROR: Unsupported argument
  }
  resources {               # ERROR: Duplicate resources block
  }
  limits {
    nofile = -1             # ERROR: Value out of range
    core   = 1.5            # ERROR: Invalid number
  }
}

service "umask-number" {
  command = ["a"]
  umask   = 0027            # ERROR: Invalid perms
}
