/* agsx — import (in progress) */
