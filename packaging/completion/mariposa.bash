# bash completion for mariposa (make install puts it in
# $(PREFIX)/share/bash-completion/completions/mariposa). mariposa answers
# completion requests itself: its commands, their flags and files.
complete -o default -C /usr/local/bin/mariposa mariposa
