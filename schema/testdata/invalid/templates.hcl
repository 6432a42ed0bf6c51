service "a" {
  command = ["x"]

  template {
    source      = "a.tpl"
    contents    = "inline"      # ERROR: Both source and contents
    destination = "a.conf"
  }

  template {                    # ERROR: Missing template source
    destination = "b.conf"
  }

  template {
    source      = "missing.tpl" # ERROR: Template source not found
    destination = "c.conf"
  }

  template {
    contents    = "x"
    destination = "d.conf"
    change_mode = "command"     # ERROR: Missing change command
  }

  template {
    contents    = "x"
    destination = "e.conf"
    change_mode = "reload"      # ERROR: Invalid change_mode
    perms       = 0640          # ERROR: Invalid perms
    signal      = "SIGHOOP"     # ERROR: Unknown signal
  }

  template {
    contents    = "x"
    destination = "f.conf"
    perms       = "0999"        # ERROR: Invalid perms
    wait        = { min = "10s", max = "1s" } # ERROR: Invalid wait
  }

  template {
    contents    = "x"
    destination = "g.conf"
    wait        = { mni = "1s" } # ERROR: Invalid wait
    command     = []             # ERROR: Empty command
  }

  template {                    # ERROR: Missing required argument
    contents = "no destination"
  }

  template {
    contents    = "y"
    destination = "d.conf"      # ERROR: Duplicate template destination
  }
}

service "b" {
  command = ["x"]
  dir     = "."

  template {
    contents    = "z"
    destination = "./e.conf"    # ERROR: Duplicate template destination
  }
}
