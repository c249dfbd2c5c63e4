/* What bindgen reads: the server API of OpenPMIx (it includes pmix_common.h). */
#include <pmix.h>
#include <pmix_server.h>
