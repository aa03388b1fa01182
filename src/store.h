/* agsx — store (in progress) */
