/** The embed widget (to come). */
export {};
