# affinity blocks: weights and operators.
service "api" {
  command = ["x"]
  count   = 3

  affinity {
    attribute = "node.meta.disk"
    value     = "ssd"
    weight    = -50             # ERROR: Invalid weight
  }
  affinity {
    attribute = "node.meta.disk"
    value     = "ssd"
    weight    = 0               # ERROR: Invalid weight
  }
  affinity {
    attribute = "node.meta.disk"
    operator  = "!=~"
    value     = "hdd"
    weight    = 101             # ERROR: Invalid weight
  }
  affinity {
    attribute = "node.meta.disk"
    operator  = "=~"            # ERROR: Unknown operator
    value     = "ssd"
  }
  affinity {
    attribute = "node.unique.name" # ERROR: Invalid affinity attribute
    value     = "web-1"
  }
  affinity {
    attribute = "node.meta.zone"
    operator  = "regexp"
    value     = "["             # ERROR: Invalid regular expression
  }
  affinity {
    attribute = "node.meta.zone"
    operator  = "==~"           # ERROR: Missing value
  }
}
