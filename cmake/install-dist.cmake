# Run by `cmake --install` (install(SCRIPT) in CMakeLists.txt): installs dist/ for the install
# prefix given then (--prefix, or the configured one). The systemd unit's ExecStart and the Slurm
# epilog's eerl point at the installed programs, not at the files' /usr defaults. Inputs (set by
# an install(CODE) before this): EERL_DIST_SRC, EERL_DIST_SBINDIR, EERL_DIST_BINDIR,
# EERL_DIST_DOCDIR, EERL_DIST_DATADIR, EERL_DIST_UNITDIR, EERL_DIST_SYSUSERSDIR, EERL_DIST_EERLD
# (1 when eerld is built: the unit and sysusers file come with it).

function(eerl_dist_dir rel ret)
  if(IS_ABSOLUTE "${rel}")
    set(${ret} "${rel}" PARENT_SCOPE)
  else()
    set(${ret} "${CMAKE_INSTALL_PREFIX}/${rel}" PARENT_SCOPE)
  endif()
endfunction()

# dist/NAME into DIR/AS with the /usr defaults replaced by the prefix's paths.
function(eerl_dist_put name dir as perms)
  eerl_dist_dir("${EERL_DIST_SBINDIR}" sbin)
  eerl_dist_dir("${EERL_DIST_BINDIR}" bin)
  eerl_dist_dir("${EERL_DIST_DOCDIR}" doc)
  file(READ "${EERL_DIST_SRC}/dist/${name}" text)
  string(REPLACE "/usr/sbin/eerld" "${sbin}/eerld" text "${text}")
  string(REPLACE "/usr/bin/eerl" "${bin}/eerl" text "${text}")
  string(REPLACE "file:///usr/share/doc/eerl/" "file://${doc}/" text "${text}")
  set(dest "$ENV{DESTDIR}${dir}/${as}")
  message(STATUS "Installing: ${dest}")
  file(MAKE_DIRECTORY "$ENV{DESTDIR}${dir}")
  file(WRITE "${dest}.tmp" "${text}")
  file(CHMOD "${dest}.tmp" PERMISSIONS ${perms})
  file(RENAME "${dest}.tmp" "${dest}")
endfunction()

set(rw OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
set(rwx OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
eerl_dist_dir("${EERL_DIST_DATADIR}/eerl" share)
eerl_dist_dir("${EERL_DIST_DOCDIR}" doc)
if(EERL_DIST_EERLD)
  eerl_dist_dir("${EERL_DIST_UNITDIR}" unitdir)
  eerl_dist_dir("${EERL_DIST_SYSUSERSDIR}" sysusers)
  eerl_dist_put(eerld.service "${unitdir}" eerld.service "${rw}")
  eerl_dist_put(eerl.sysusers.conf "${sysusers}" eerl.conf "${rw}")
  eerl_dist_put(eerld.conf "${share}" eerld.conf.example "${rw}")
  eerl_dist_put(../docs/eerld.md "${doc}" eerld.md "${rw}")
endif()
eerl_dist_put(slurm-epilog-eerl.sh "${share}" slurm-epilog-eerl.sh "${rwx}")
