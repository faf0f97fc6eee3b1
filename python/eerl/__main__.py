"""python -m eerl COMMAND: the package's commands.

    python -m eerl doctor [--json] [--socket PATH]   check this node before a first run

(python -m eerl.report draws traces.)
"""

import sys

USAGE = ("usage: python -m eerl doctor [--json] [--socket PATH]\n\n"
         "commands:\n"
         "  doctor   check this node before a first run: the package against libeerl, driver,\n"
         "           GPUs, clocks, eerld, permission, framework releases (docs/doctor.md)\n\n"
         "python -m eerl.report draws traces; 'python -m eerl doctor --help' describes doctor.\n")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        (sys.stdout if argv else sys.stderr).write(USAGE)
        return 0 if argv else 2
    if argv[0] == "doctor":
        from .doctor import main as doctor
        return doctor(argv[1:])
    sys.stderr.write("python -m eerl: unknown command '%s'; valid commands: doctor\n" % argv[0])
    return 2


if __name__ == "__main__":
    sys.exit(main())
