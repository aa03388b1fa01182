# AGSX_CHECK_FLAG(VAR, FLAG, [compile|link])
# -------------------------------------------
# Appends FLAG to VAR when the compiler (or, with `link`, the linker) accepts
# it without a diagnostic: -Werror, so that a compiler that only warns about
# an unknown flag (clang's -Wunused-command-line-argument) does not get it.
AC_DEFUN([AGSX_CHECK_FLAG], [
  AS_VAR_PUSHDEF([agsx_cv], [agsx_cv_flag_$3_$2])
  AC_CACHE_CHECK([whether $CC accepts $2], [agsx_cv], [
    agsx_save_CFLAGS=$CFLAGS agsx_save_LDFLAGS=$LDFLAGS
    AS_IF([test "$3" = link],
          [LDFLAGS="$LDFLAGS -Werror $2"
           AC_LINK_IFELSE([AC_LANG_PROGRAM([], [])], [AS_VAR_SET([agsx_cv], [yes])], [AS_VAR_SET([agsx_cv], [no])])],
          [CFLAGS="$CFLAGS -Werror $2"
           AC_COMPILE_IFELSE([AC_LANG_PROGRAM([], [])], [AS_VAR_SET([agsx_cv], [yes])], [AS_VAR_SET([agsx_cv], [no])])])
    CFLAGS=$agsx_save_CFLAGS LDFLAGS=$agsx_save_LDFLAGS])
  AS_VAR_IF([agsx_cv], [yes], [$1="$$1 $2"])
  AS_VAR_POPDEF([agsx_cv])
])
